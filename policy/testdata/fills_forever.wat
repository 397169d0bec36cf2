;; Clears 64 KiB of its memory, over and over: a loop of few instructions
;; that each do much work, which the fuel must still bound.
(module
  (memory (export "memory") 2)
  (func (export "kvmesh_abi_version") (result i32) (i32.const 1))
  (func (export "kvmesh_buffer") (param i32) (result i32) (i32.const 65536))
  (func (export "kvmesh_admit") (param i32) (result i32)
    (loop $again
      (memory.fill (i32.const 0) (i32.const 0) (i32.const 65536))
      (br $again))
    (i32.const 0)))
