-- Black-Scholes European option prices: a scalar entry with eight parameters and five results
-- (the shape of a pricing call made from a loop in Python), and the same formula over arrays.
-- Written for pybridge's `pybridge bench programs`.
-- ==
-- entry: price
-- random input { f32 f32 f32 f32 f32 f32 i32 bool }

-- ==
-- entry: prices
-- random input { [1000]f32 [1000]f32 f32 f32 f32 }
-- random input { [1000000]f32 [1000000]f32 f32 f32 f32 }

def cnd (x: f32): f32 =
  0.5f32 * (1f32 + f32.erf (x / f32.sqrt 2f32))

def bs (s: f32) (k: f32) (r: f32) (v: f32) (t: f32) (q: f32) (call: bool): (f32, f32, f32, f32, f32) =
  let s = 1f32 + f32.abs s
  let k = 1f32 + f32.abs k
  let v = 0.01f32 + f32.abs v
  let t = 0.01f32 + f32.abs t
  let sq = v * f32.sqrt t
  let d1 = (f32.log (s / k) + (r - q + 0.5f32 * v * v) * t) / sq
  let d2 = d1 - sq
  let df = f32.exp (-r * t)
  let dq = f32.exp (-q * t)
  let c = s * dq * cnd d1 - k * df * cnd d2
  let p = k * df * cnd (-d2) - s * dq * cnd (-d1)
  let delta = if call then dq * cnd d1 else dq * (cnd d1 - 1f32)
  let gamma = dq * f32.exp (-0.5f32 * d1 * d1) / (s * sq * f32.sqrt (2f32 * f32.pi))
  let vega = s * dq * f32.sqrt t * f32.exp (-0.5f32 * d1 * d1) / f32.sqrt (2f32 * f32.pi)
  in (if call then c else p, if call then p else c, delta, gamma, vega)

entry price (s: f32) (k: f32) (r: f32) (v: f32) (t: f32) (q: f32) (steps: i32) (call: bool): (f32, f32, f32, f32, f32) =
  let (a, b, c, d, e) = bs s k r v t q call
  let n = f32.i32 (1 + (steps & 3))
  in (a, b / n, c, d, e)

entry prices [n] (s: [n]f32) (k: [n]f32) (r: f32) (v: f32) (t: f32): ([n]f32, [n]f32) =
  unzip (map2 (\a b -> let (c, p, _, _, _) = bs a b r v t 0f32 true in (c, p)) s k)
