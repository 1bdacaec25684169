-- Parallel failures on the multicore backend (issue 22, item 3) and unrelated calls after them.
entry psum (xs: []i64) : i64 = reduce (+) 0 xs
entry pscan (xs: []i64) : []i64 = scan (+) 0 xs
entry pmap (xs: []f64) : []f64 = map (\x -> x * 2 + 1) xs
-- failures inside a parallel map, reduce, scan and a nested map
entry gather (xs: []i64) (is: []i64) : []i64 = map (\i -> xs[i]) is
entry divide (xs: []i64) (ds: []i64) : []i64 = map2 (/) xs ds
entry checked (xs: []f64) : []f64 = map (\x -> assert (x >= 0) (f64.sqrt x)) xs
entry rdivide (xs: []i64) (d: i64) : i64 = reduce (+) 0 (map (\x -> x / (d + x % 2)) xs)
entry sdivide (xs: []i64) (d: i64) : []i64 = scan (+) 0 (map (\x -> x / (d * (x % 3))) xs)
entry rows (xss: [][]i64) (i: i64) : []i64 = map (\xs -> reduce (+) 0 xs + xs[i]) xss
