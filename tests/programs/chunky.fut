-- Small programs for pybridge.dask's tests (tests/test_dask.py).

-- | Square roots of non-negative values; a negative one fails the assertion, so a chunk holding
-- one raises ProgramError from that chunk only.
entry checked_sqrt [n] (xs: [n]f64) : [n]f64 =
  map (\x -> assert (x >= 0) (f64.sqrt x)) xs

-- | `iters` steps of `y = y*0.999 + 0.001` on every element: compute-bound, slow enough per chunk
-- for a worker to be killed while it runs.
entry spin [n] (iters: i32) (xs: [n]f32) : [n]f32 =
  map (\x -> loop y = x for _i < iters do y * 0.999f32 + 0.001f32) xs

-- | Row sums of stacked partial histograms: the combine step of a histogram reduction.
entry add_rows [k] [m] (ps: [k][m]i32) : [m]i32 =
  map i32.sum (transpose ps)

-- | Elementwise `xs + ys` where only `n` is shared and the second dimension is not:
-- two arrays that must agree on their first axis only.
entry add_first [n] [m] [p] (xs: [n][m]f32) (ys: [n][p]f32) : [n]f32 =
  map2 (\x y -> f32.sum x + f32.sum y) xs ys

-- | Each element plus the sum of 0..k-1, where k is the block's first element, through a
-- materialised array of k elements: a block whose first element is huge asks for that much memory
-- (out of memory in that block only).
entry alloc_first [n] (xs: [n]i64) : [n]i64 =
  let k = if n == 0 then 0 else i64.max 0 xs[0]
  let big = scan (+) 0 (iota k)
  let s = if k == 0 then 0 else big[k - 1]
  in map (+ s) xs
