;; Observe calls a small function forever: most of the work is in the
;; callee, so the fuel it spends must reach the caller's loop.
(module
  (memory (export "memory") 2)
  (global $sink (mut i64) (i64.const 0))
  (func (export "kvmesh_abi_version") (result i32) (i32.const 1))
  (func (export "kvmesh_buffer") (param i32) (result i32) (i32.const 65536))
  (func $work (param $x i64) (result i64)
    (i64.add (i64.mul (local.get $x) (i64.const 3)) (i64.xor (local.get $x) (i64.const 5))))
  (func (export "kvmesh_observe") (param i32) (result i32)
    (loop $forever
      (global.set $sink (call $work (global.get $sink)))
      (br $forever))
    (i32.const 0))
  (func (export "kvmesh_victims") (param i32) (result i32) (i32.const 0)))
