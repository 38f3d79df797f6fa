"""Memory layer: virtual address space, physical frames per memory side, flat page
tables, MMU/TLB, page migration and duplication, and KV-cache allocators.

* :mod:`.address_space` -- :class:`VirtualAddressSpace` (one per system, page-granular
  first fit);
* :mod:`.frames` -- :class:`FrameManager` (frames of one side: contiguous or scattered
  allocation, occupancy, OutOfMemoryError naming side / requested / free bytes);
* :mod:`.page_table` -- :class:`PageTable` (flat table of one side, kept sparsely);
* :mod:`.mmu` -- :class:`MmuSpec` and the dram_models ``Translation`` (fixed-latency
  miss or a real PTE read through the DRAM);
* :mod:`.system_memory` -- :class:`SystemMemory`: places tensors, duplicates and
  migrates pages between sides (costs from the interconnect and both sides' streaming
  rates), H2M2 Eq. 2 fragmentation, translations for kernel runs;
* :mod:`.dram` -- the cached engine per side, streaming bandwidth and idle latency;
* :mod:`.kv_layout` -- :class:`KVLayout`, how a KV allocator lays a request's KV out;
* :mod:`.layer_traffic` -- the DRAM requests of one decoder layer as a trace, for replay
  in any DRAM model.

The KV-cache allocators that choose a layout are :mod:`h2m2sim.allocators`.
"""
