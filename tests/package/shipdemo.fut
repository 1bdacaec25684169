-- A small library to share: records, an opaque type, a sum, arrays of rank 2.

type point = {x: f32, y: f32}

-- The accumulator's representation is hidden by the module: callers only hold it.
module running : {
  type acc
  val empty : acc
  val add [n][m] : acc -> [n][m]f64 -> acc
  val mean : acc -> f64
} = {
  type acc = {total: f64, count: i64}
  def empty : acc = {total = 0, count = 0}
  def add [n][m] (s: acc) (a: [n][m]f64) : acc =
    {total = s.total + f64.sum (flatten a), count = s.count + n * m}
  def mean (s: acc) : f64 = if s.count == 0 then 0 else s.total / f64.i64 s.count
}

-- | A running total: a state the caller keeps between calls and changes only through the entry
-- points below.
type acc = running.acc

type shape = #circle f32 | #rect f32 f32

-- | Scale every element of a matrix by a factor.
entry scale [n][m] (k: f32) (a: [n][m]f32) : [n][m]f32 =
  map (map (* k)) a

-- | Row sums of a matrix.
entry row_sums [n][m] (a: [n][m]f64) : [n]f64 =
  map f64.sum a

-- | Matrix product of an n×k and a k×m matrix.
entry matmul [n][k][m] (a: [n][k]f32) (b: [k][m]f32) : [n][m]f32 =
  map (\row -> map (\col -> f32.sum (map2 (*) row col)) (transpose b)) a

-- | The centroid of a set of points, given as two coordinate arrays.
entry centroid [n] (xs: [n]f32) (ys: [n]f32) : point =
  let c = f32.i64 (i64.max n 1)
  in {x = f32.sum xs / c, y = f32.sum ys / c}

-- | Move a point by (dx, dy).
entry shift (p: point) (dx: f32) (dy: f32) : point =
  {x = p.x + dx, y = p.y + dy}

-- | A fresh accumulator.
entry acc_new (_: i32) : acc = running.empty

-- | Add the elements of a matrix to an accumulator.
entry acc_add [n][m] (s: acc) (a: [n][m]f64) : acc = running.add s a

-- | The mean of everything added so far (0 when empty).
entry acc_mean (s: acc) : f64 = running.mean s

-- | The area of a shape.
entry area (s: shape) : f32 =
  match s
  case #circle r -> f32.pi * r * r
  case #rect w h -> w * h

-- | A square of side w.
entry square (w: f32) : shape = #rect w w

-- | Count and sum of the positive elements of an integer matrix.
entry count_pos [n][m] (a: [n][m]i32) : (i64, i32) =
  let flat = flatten a
  let pos = map (\v -> if v > 0 then 1 else 0) flat
  in (i64.sum (map i64.i32 pos), i32.sum (map2 (*) pos flat))
