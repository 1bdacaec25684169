-- Summary statistics of an f64 sample, returned as one record (an opaque named "stats").
-- pybridge example catalog: example "stats".

-- | Sum, mean and population standard deviation (divided by n, not n-1).
type stats = {sum: f64, mean: f64, std: f64}

-- | Sum, mean and population standard deviation of `xs`, computed in
-- two passes: the mean first, then the mean of the squared deviations
-- from it.  An empty array gives sum 0 and NaN for mean and std.
entry stats [n] (xs: [n]f64) : stats =
  let s = f64.sum xs
  let m = s / f64.i64 n
  let ss = f64.sum (map (\x -> (x - m) * (x - m)) xs)
  in {sum = s, mean = m, std = f64.sqrt (ss / f64.i64 n)}
