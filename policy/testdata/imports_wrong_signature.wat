;; Imports a provided WASI function with the wrong signature.
(module
  (import "wasi_snapshot_preview1" "random_get" (func (param i64) (result i32)))
  (memory (export "memory") 2)
  (func (export "kvmesh_abi_version") (result i32) (i32.const 1))
  (func (export "kvmesh_buffer") (param i32) (result i32) (i32.const 65536))
  (func (export "kvmesh_admit") (param i32) (result i32) (local.get 0)))
