-- Escape-time Mandelbrot set: scalar parameters, an integer image out; the work is a loop per pixel.
-- Written for pybridge's `pybridge bench programs`.
-- ==
-- input { 32i64 32i64 50i32 -2.0f32 -1.0f32 1.0f32 1.0f32 }
-- input { 256i64 256i64 100i32 -2.0f32 -1.0f32 1.0f32 1.0f32 }

entry main (w: i64) (h: i64) (limit: i32) (x0: f32) (y0: f32) (x1: f32) (y1: f32): [h][w]i32 =
  tabulate_2d h w (\i j ->
    let cr = x0 + (x1 - x0) * f32.i64 j / f32.i64 w
    let ci = y0 + (y1 - y0) * f32.i64 i / f32.i64 h
    let (_, _, k) = loop (zr, zi, k) = (0f32, 0f32, 0) while k < limit && zr * zr + zi * zi < 4f32 do
                      (zr * zr - zi * zi + cr, 2f32 * zr * zi + ci, k + 1)
    in k)
