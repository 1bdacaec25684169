-- Mandelbrot escape counts, with exactly the definition the CUDA kernel uses.
-- pybridge example catalog: example "mandelbrot"; CUDA op "mandelbrot".

-- | Iterations done on `z = z*z + c` (in f32, from z = 0) while
-- `|z|^2 <= 4`, at most `max_iter`: the smallest k with `|z_k|^2 > 4`,
-- or `max_iter` if there is none below it.  One step computes
-- `zr' = zr*zr - zi*zi + cr` and `zi' = 2*zr*zi + ci`.
def escape_count (max_iter: i32) (cr: f32) (ci: f32) : i32 =
  let (_, _, count) =
    loop (zr, zi, count) = (0f32, 0f32, 0i32)
    while count < max_iter && zr * zr + zi * zi <= 4f32 do
      (zr * zr - zi * zi + cr, 2f32 * zr * zi + ci, count + 1)
  in count

-- | Escape counts of an `h`-by-`w` image: pixel `(i, j)` (row `i`,
-- column `j`) is the point `c = (x0 + f32(j)*dx, y0 + f32(i)*dy)`.
entry mandelbrot (w: i64) (h: i64) (x0: f32) (y0: f32) (dx: f32) (dy: f32) (max_iter: i32) : [h][w]i32 =
  map (\i ->
         let ci = y0 + f32.i64 i * dy
         in map (\j -> escape_count max_iter (x0 + f32.i64 j * dx) ci) (iota w))
      (iota h)
