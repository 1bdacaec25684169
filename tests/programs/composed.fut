-- Composed values for restore checks (tests/test_reliability3.py): arrays of records and sums,
-- nested sums, sums with array and bool payloads, records holding sums.
type point = {x: f32, y: f32}
type shape = #circle f64 | #rect f64 f64
type nested = #a shape | #b i32 | #c
type~ arrsum = #xs ([]i32) | #none
type arrsum2 [m] = #ys ([m]i32) | #nothing
type flag = #on bool | #off i64
type rec2 = {p: point, s: shape, n: i64}

entry pts (xs: []f32) (ys: []f32) : []point = map2 (\x y -> {x, y}) xs ys
entry shapes (ws: []f64) : []shape = map (\w -> if w > 0 then #rect w w else #circle w) ws
entry nest (k: i32) : nested = if k == 0 then #a (#circle 1) else if k == 1 then #b k else #c
entry nests (ks: []i32) : []nested = map (\k -> if k == 0 then #a (#rect 1 2) else if k == 1 then #b k else #c) ks
entry asum (n: i64) : arrsum = if n > 0 then #xs (iota n |> map i32.i64) else #none
entry asums (n: i64) (m: i64) : []arrsum2 [m] = map (\i -> if i % 2 == 0 then #ys (replicate m (i32.i64 i)) else #nothing) (iota n)
entry flags (n: i64) : []flag = map (\i -> if i % 2 == 0 then #on (i % 4 == 0) else #off i) (iota n)
entry r2 (k: i32) : rec2 = {p = {x = 1, y = 2}, s = #circle 3, n = i64.i32 k}
entry r2s (n: i64) : []rec2 = map (\i -> {p = {x = f32.i64 i, y = 2}, s = #rect 1 2, n = i}) (iota n)
entry tups (n: i64) : [](i32, shape) = map (\i -> (i32.i64 i, #circle 1)) (iota n)
entry mat (n: i64) : [][]point = replicate n (replicate 2 {x = 1, y = 2})

entry use_pts (ps: []point) : f32 = reduce (+) 0 (map (\p -> p.x + p.y) ps)
entry use_shapes (ss: []shape) : f64 = reduce (+) 0 (map (\s -> match s case #circle r -> r case #rect w h -> w * h) ss)
entry use_nests (ns: []nested) : i32 = reduce (+) 0 (map (\n -> match n case #a _ -> 1 case #b k -> k case #c -> 100) ns)
entry use_flags (fs: []flag) : i64 = reduce (+) 0 (map (\f -> match f case #on b -> if b then 1 else 0 case #off k -> k) fs)
entry use_r2s (rs: []rec2) : i64 = reduce (+) 0 (map (\r -> r.n) rs)
entry use_mat (m: [][]point) : f32 = reduce (+) 0 (map (\r -> reduce (+) 0 (map (\p -> p.x) r)) m)

-- A sum whose variants hold a bool and an array of an unsigned type (issue 22, found in CI):
-- Futhark stores the u16 payload as i16 (its core types have no signedness) and leaves the
-- inactive bool slot as it was (any byte). Restore must take what Futhark stores.
type~ usum = #flag bool | #words ([]u16) | #none
entry usum (k: i32) : usum = if k == 0 then #flag true else if k == 1 then #words [1u16, 65535u16] else #none
-- u16 and i16 payloads in different variants: one slot in Futhark's layout, of core type i16.
type mixed = #a u16 | #b i16 | #c bool
entry mixed (k: i32) : mixed = if k == 0 then #a 65535u16 else if k == 1 then #b (-2i16) else #c false
