;; Exports kvmesh_telemetry with a signature the ABI does not have.
(module
  (memory (export "memory") 2)
  (func (export "kvmesh_abi_version") (result i32) (i32.const 1))
  (func (export "kvmesh_buffer") (param i32) (result i32) (i32.const 65536))
  (func (export "kvmesh_telemetry") (param i64) (result i32) (i32.const 0))
  (func (export "kvmesh_admit") (param $count i32) (result i32) (local.get $count))
)
