"""Memory layer: virtual address space, physical frames per memory side, page tables,
MMU/TLB, page migration (``h2m2sim.memory.*``) and KV-cache allocators
(``h2m2sim.memory.allocators``)."""
