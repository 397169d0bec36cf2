;; Answers one victim more than asked for.
(module
  (memory (export "memory") 2)
  (func (export "kvmesh_abi_version") (result i32) (i32.const 1))
  (func (export "kvmesh_buffer") (param i32) (result i32) (i32.const 65536))
  (func (export "kvmesh_observe") (param i32) (result i32) (i32.const 0))
  (func (export "kvmesh_victims") (param $max i32) (result i32) (i32.add (local.get $max) (i32.const 1))))
