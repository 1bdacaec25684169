-- Prefix sums: inclusive, exclusive and segmented (by flags), three results. Written for
-- pybridge's `pybridge bench programs`.
-- ==
-- random input { [1000]i32 [1000]bool }
-- random input { [1000000]i32 [1000000]bool }

entry main [n] (xs: [n]i32) (flags: [n]bool): ([n]i32, [n]i32, [n]i32) =
  let inc = scan (+) 0 xs
  let exc = map2 (-) inc xs
  let (_, seg) = unzip (scan (\(fa, a) (fb, b) -> (fa || fb, if fb then b else a + b)) (false, 0) (zip flags xs))
  in (inc, exc, seg)
