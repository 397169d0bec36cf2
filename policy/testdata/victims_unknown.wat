;; Names a victim it was never told about.
(module
  (memory (export "memory") 2)
  (func (export "kvmesh_abi_version") (result i32) (i32.const 1))
  (func (export "kvmesh_buffer") (param i32) (result i32) (i32.const 65536))
  (func (export "kvmesh_observe") (param i32) (result i32) (i32.const 0))
  (func (export "kvmesh_victims") (param i32) (result i32)
    (i64.store (i32.const 65536) (i64.const 999999))
    (i32.const 1)))
