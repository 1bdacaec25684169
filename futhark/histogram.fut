-- Histogram of i32 values.
-- pybridge example catalog: example "histogram"; CUDA op "histogram".

-- | `histogram nbins xs` counts, for each bin `b` in `[0, nbins)`, the
-- elements of `xs` equal to `b`.  Values outside `[0, nbins)`
-- (negative ones included) are ignored: `reduce_by_index` drops
-- out-of-bounds indices.  A negative `nbins` is a runtime error.
entry histogram [n] (nbins: i64) (xs: [n]i32) : [nbins]i32 =
  reduce_by_index (replicate nbins 0i32) (+) 0i32 (map i64.i32 xs) (replicate n 1i32)
