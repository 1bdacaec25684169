-- Inclusive prefix sums.
-- pybridge example catalog: examples "prefix_sum" (CUDA op "scan") and "prefix_sum_i64".

-- | Inclusive prefix sum: element `i` of the result is
-- `xs[0] + ... + xs[i]`.
entry prefix_sum [n] (xs: [n]f32) : [n]f32 =
  scan (+) 0f32 xs

-- | Inclusive prefix sum of i64 values (wrapping on overflow).
entry prefix_sum_i64 [n] (xs: [n]i64) : [n]i64 =
  scan (+) 0i64 xs
