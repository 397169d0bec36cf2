;; Grows its memory on every admission until the sandbox's page limit stops
;; it, then traps.
(module
  (memory (export "memory") 2)
  (func (export "kvmesh_abi_version") (result i32) (i32.const 1))
  (func (export "kvmesh_buffer") (param i32) (result i32) (i32.const 65536))
  (func (export "kvmesh_admit") (param $n i32) (result i32)
    (loop $more
      (br_if $more (i32.ne (memory.grow (i32.const 1)) (i32.const -1))))
    unreachable))
