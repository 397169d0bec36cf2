;; Admission that, per insert, calls four helpers which each spin a
;; thousand times and leave by a different path: falling off the end, a
;; return, a br_if to the function's label and a br_table to it. Metering
;; keeps a function's fuel in a local and must store it back on every one
;; of those paths, or the helpers' work would go unpaid.
(module
  (memory (export "memory") 2)
  (func (export "kvmesh_abi_version") (result i32) (i32.const 1))
  (func (export "kvmesh_buffer") (param i32) (result i32) (i32.const 65536))
  ;; 2 units per iteration: i32.sub, br_if
  (func $by_end (param $k i32)
    (loop $l
      (local.set $k (i32.sub (local.get $k) (i32.const 1)))
      (br_if $l (local.get $k))))
  ;; 3 units per iteration: i32.sub, br_if and the return, which is in the
  ;; loop's segment
  (func $by_return (param $k i32) (result i32)
    (loop $l
      (local.set $k (i32.sub (local.get $k) (i32.const 1)))
      (br_if $l (local.get $k)))
    (return (i32.const 7)))
  ;; 4 units per iteration: i32.sub, i32.eqz, br_if, br
  (func $by_br (param $k i32)
    (loop $l
      (local.set $k (i32.sub (local.get $k) (i32.const 1)))
      (br_if 1 (i32.eqz (local.get $k)))
      (br $l)))
  ;; 3 units per iteration: i32.sub, i32.eqz, br_table
  (func $by_table (param $k i32)
    (loop $l
      (local.set $k (i32.sub (local.get $k) (i32.const 1)))
      (br_table $l 1 (i32.eqz (local.get $k)))))
  (func (export "kvmesh_admit") (param $n i32) (result i32)
    (local $i i32)
    (block $done
      (loop $next
        (br_if $done (i32.ge_u (local.get $i) (local.get $n)))
        (call $by_end (i32.const 1000))
        (drop (call $by_return (i32.const 1000)))
        (call $by_br (i32.const 1000))
        (call $by_table (i32.const 1000))
        (i32.store (i32.add (i32.const 65536) (i32.shl (local.get $i) (i32.const 2))) (i32.const 0))
        (local.set $i (i32.add (local.get $i) (i32.const 1)))
        (br $next)))
    (local.get $n)))
