-- Entry points whose names Python cannot use as they are (tests/test_names.py).
-- Keywords of Python (not of Futhark), primes, the wildcard `_` repeated, numeric record fields,
-- and entry points / fields named like pybridge's own attributes.

-- (Variant names with primes are left out: Futhark 0.25.32 writes them unmangled into C function
-- names, e.g. futhark_new_opaque_shape_lambda', which the C compiler rejects. A Futhark bug.)
type rec = {as: i32, lambda: f64, x': i32, class: i32, None: bool}
type sparse = {0: i32, 1: f32, 3: bool}
type clash = {free: i32, store: i32, shape: i32, valid: i32, field: i32}
type shape = #as i32 | #lambda f32 | #None

entry wildcards (_: i32) (_: i32) (x: i32) : i32 = x
entry keywords (as: i32) (lambda: i32) (class: i32) (None: i32) (True: i32) (is: i32) : i32 =
  as * 100000 + lambda * 10000 + class * 1000 + None * 100 + True * 10 + is
entry primes (arr': []i32) (x'': i32) (arr_1: i32) : []i32 = map (\a -> a * x'' + arr_1) arr'
entry make_rec (as: i32) (lambda: f64) : rec = {as, lambda, x' = as + 1, class = as + 2, None = true}
entry rec_sum (r: rec) : f64 = f64.i32 (r.as + r.x' + r.class) + r.lambda + (if r.None then 1000 else 0)
entry make_sparse (x: i32) : sparse = {0 = x, 1 = f32.i32 x, 3 = x > 0}
entry sparse_sum (s: sparse) : i32 = s.0 + i32.f32 s.1 + i32.bool s.3
entry make_clash (x: i32) : clash = {free = x, store = x + 1, shape = x + 2, valid = x + 3, field = x + 4}
entry recs (as: []i32) (lambda: []f64) : []rec =
  map2 (\a l -> {as = a, lambda = l, x' = a, class = a, None = false}) as lambda
entry recs_len (rs: []rec) : i64 = length rs
entry make_shape (k: i32) : shape = if k == 0 then #as k else if k == 1 then #lambda 1.5 else #None
entry close (x: i32) : i32 = x + 1
entry sync (x: i32) : i32 = x + 2
entry report (x: i32) : i32 = x + 3
entry types (x: i32) : i32 = x + 4
entry manifest (x: i32) : i32 = x + 5
entry f' (x: i32) : i32 = x + 6
entry f_1 (x: i32) : i32 = x + 7
entry one_field (x: i32) : {0: i32} = {0 = x}
entry shapes (ks: []i32) : [](shape) = map (\k -> if k == 0 then #as k else if k == 1 then #lambda 1.5 else #None) ks
