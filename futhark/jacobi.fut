-- Jacobi iteration of the 5-point stencil on a 2-D grid in f32, the first and last rows and
-- columns held fixed (boundary values). pybridge example catalog: example "jacobi".

def jacobi_step [n] [m] (g: [n][m]f32) : [n][m]f32 =
  tabulate_2d n m (\i j ->
    if i == 0 || j == 0 || i == n - 1 || j == m - 1 then g[i, j]
    else 0.25f32 * (g[i - 1, j] + g[i + 1, j] + g[i, j - 1] + g[i, j + 1]))

-- | `steps` Jacobi steps. Over a row block extended by `steps` rows of each neighbour (a halo,
-- `pybridge.dask.halo_map`), the block's own rows come out as in the whole grid: an edge row's
-- error moves inwards one row per step, so it never leaves the halo.
entry jacobi [n] [m] (steps: i32) (g: [n][m]f32) : [n][m]f32 =
  loop g for _i < steps do jacobi_step g
