-- Aliasing-prone entry points for pybridge's reliability tests (tests/test_reliability.py).
-- Non-unique results may share memory with arguments; unique (*) parameters are consumed.

type~ pair = {a: []i32, b: []i32}

entry ident (xs: []i32) : []i32 = xs
entry copyof (xs: []i32) : []i32 = copy xs
entry set0 (xs: *[]i32) (v: i32) : *[]i32 = xs with [0] = v
entry twice (xs: []i32) : ([]i32, []i32) = (xs, xs)
entry mkpair (xs: []i32) (ys: []i32) : pair = {a = xs, b = ys}
entry first (p: pair) : []i32 = p.a
entry bump (p: *pair) : *pair = p with a = map (+1) p.a
entry sum (xs: []i32) : i32 = i32.sum xs
entry add [n] (xs: [n]i32) (ys: [n]i32) : [n]i32 = map2 (+) xs ys
entry count [n] (k: i64) (xs: [n]i32) : [k]i32 = replicate k (i32.i64 n)
entry divide (a: i32) (b: i32) : i32 = a / b
entry scale (x: f32) (xs: []f32) : []f32 = map (* x) xs
entry anyb (bs: []bool) : bool = reduce (||) false bs
entry countb (bs: []bool) : i64 = i64.sum (map (\b -> if b then 1 else 0) bs)
entry big (n: i64) : []u8 = replicate n 0u8
