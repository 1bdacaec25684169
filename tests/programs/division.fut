-- Signed division and remainder in all four of Futhark's forms, for the lowest-value / -1 case
-- (x86 idiv traps on it: pybridge.futhark.csource guards the generated C).
entry div32 (x: i32) (y: i32) : (i32, i32, i32, i32) = (x / y, x % y, x // y, x %% y)
entry div64 (x: i64) (y: i64) : (i64, i64, i64, i64) = (x / y, x % y, x // y, x %% y)
entry div32s (xs: []i32) (ys: []i32) : []i32 = map2 (/) xs ys
