-- One all-pairs n-body step over structure-of-arrays: seven arrays and two scalars in, six
-- arrays out. Written for pybridge's `pybridge bench programs`.
-- ==
-- random input { [16]f32 [16]f32 [16]f32 [16]f32 [16]f32 [16]f32 [16]f32 f32 f32 }
-- random input { [1000]f32 [1000]f32 [1000]f32 [1000]f32 [1000]f32 [1000]f32 [1000]f32 f32 f32 }

entry main [n] (xs: [n]f32) (ys: [n]f32) (zs: [n]f32) (vx: [n]f32) (vy: [n]f32) (vz: [n]f32) (ms: [n]f32)
               (dt: f32) (eps: f32): ([n]f32, [n]f32, [n]f32, [n]f32, [n]f32, [n]f32) =
  let eps = 0.01f32 + f32.abs eps
  let acc i =
    let (ax, ay, az) =
      reduce (\(a, b, c) (d, e, f) -> (a + d, b + e, c + f)) (0, 0, 0)
             (map4 (\x y z m ->
                      let dx = x - xs[i]
                      let dy = y - ys[i]
                      let dz = z - zs[i]
                      let r2 = dx * dx + dy * dy + dz * dz + eps
                      let inv = f32.abs m / (r2 * f32.sqrt r2)
                      in (dx * inv, dy * inv, dz * inv)) xs ys zs ms)
    in (ax, ay, az)
  let (ax, ay, az) = unzip3 (tabulate n acc)
  let vx' = map2 (\v a -> v + dt * a) vx ax
  let vy' = map2 (\v a -> v + dt * a) vy ay
  let vz' = map2 (\v a -> v + dt * a) vz az
  in (map2 (\x v -> x + dt * v) xs vx', map2 (\y v -> y + dt * v) ys vy', map2 (\z v -> z + dt * v) zs vz',
      vx', vy', vz')
