-- Work sized for many GPUs through pybridge.dask (`pybridge bench scaling`, docs/scale-out.md):
-- each entry does enough inside one call for a Dask task to carry it (tens of milliseconds on an
-- H100 at the benchmark's sizes), and takes and returns plain arrays, so blocks go in and come
-- back without a copy.

-- | The length of `xs`, as a one-element array: a call that does no work on its block (the
-- per-task overhead benchmark, B0).
entry count [n] (_xs: [n]f32) : [1]f32 =
  [f32.i64 n]

-- | `iters` rounds of `ys = a*xs + ys`: saxpy iterated inside one call (memory-bound, B1).
entry saxpy_iter [n] (iters: i32) (a: f32) (xs: [n]f32) (ys: [n]f32) : [n]f32 =
  loop ys for _i < iters do map2 (\x y -> a * x + y) xs ys

-- | One Jacobi step of the 5-point stencil; the first and last rows and columns stay as they are
-- (fixed boundary values).
def jacobi_step [n] [m] (g: [n][m]f32) : [n][m]f32 =
  tabulate_2d n m (\i j ->
    if i == 0 || j == 0 || i == n - 1 || j == m - 1 then g[i, j]
    else 0.25f32 * (g[i - 1, j] + g[i + 1, j] + g[i, j - 1] + g[i, j + 1]))

-- | `steps` Jacobi steps (B2). Over a row block extended by `steps` rows of each neighbour (a
-- halo), the block's own rows come out as in the whole grid: an edge row's error moves inwards one
-- row per step, so it never leaves the halo.
entry jacobi [n] [m] (steps: i32) (g: [n][m]f32) : [n][m]f32 =
  loop g for _i < steps do jacobi_step g

-- | `steps` all-pairs n-body steps (B4) over bodies stored as rows (x, y, z, vx, vy, vz, mass):
-- the step of benchmarks/programs/nbody.fut, repeated, on one array in and one out.
entry nbody [n] (steps: i32) (dt: f32) (eps: f32) (bodies: [n][7]f32) : [n][7]f32 =
  let eps = 0.01f32 + f32.abs eps
  let step (bs: [n][7]f32) : [n][7]f32 =
    let acc (b: [7]f32) =
      reduce (\(a, c, e) (d, f, g) -> (a + d, c + f, e + g)) (0, 0, 0)
             (map (\o ->
                     let dx = o[0] - b[0]
                     let dy = o[1] - b[1]
                     let dz = o[2] - b[2]
                     let r2 = dx * dx + dy * dy + dz * dz + eps
                     let inv = f32.abs o[6] / (r2 * f32.sqrt r2)
                     in (dx * inv, dy * inv, dz * inv)) bs)
    in map (\b ->
              let (ax, ay, az) = acc b
              let vx = b[3] + dt * ax
              let vy = b[4] + dt * ay
              let vz = b[5] + dt * az
              in [b[0] + dt * vx, b[1] + dt * vy, b[2] + dt * vz, vx, vy, vz, b[6]]) bs
  in loop bs = bodies for _i < steps do step bs
