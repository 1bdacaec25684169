-- Entry points that fail at runtime on bad input (bounds check, assertion), to exercise
-- pybridge's error reporting.  pybridge example catalog: examples "index_at", "checked_sqrt".

-- | `xs[i]`.  An index outside `[0, n)` fails Futhark's bounds check
-- ("Index [i] out of bounds for array of shape [n].").
entry index_at (xs: []f32) (i: i64) : f32 = xs[i]

-- | The square root of `x`.  A negative `x` (or NaN) fails the
-- assertion ("Assertion is false: ...").
entry checked_sqrt (x: f64) : f64 = assert (x >= 0) (f64.sqrt x)
