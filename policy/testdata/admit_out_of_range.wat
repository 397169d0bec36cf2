;; Answers a disk write mode the ABI does not have.
(module
  (memory (export "memory") 2)
  (func (export "kvmesh_abi_version") (result i32) (i32.const 1))
  (func (export "kvmesh_buffer") (param i32) (result i32) (i32.const 65536))
  (func (export "kvmesh_admit") (param $n i32) (result i32)
    (i32.store8 (i32.const 65536) (i32.const 7))
    (local.get $n)))
