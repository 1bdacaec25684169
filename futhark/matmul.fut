-- Dense matrix product in f32.
-- pybridge example catalog: example "matmul"; CUDA op "matmul".

-- | `matmul a b` is the n-by-p product of the n-by-m matrix `a` and
-- the m-by-p matrix `b`: `c[i,k] = sum_j a[i,j] * b[j,k]`.
entry matmul [n] [m] [p] (a: [n][m]f32) (b: [m][p]f32) : [n][p]f32 =
  let bt = transpose b
  in map (\a_row -> map (\b_col -> f32.sum (map2 (*) a_row b_col)) bt) a
