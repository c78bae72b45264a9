"""Hypothesis strategies for random small protocols.

Small enough that the unreduced explicit search finishes in milliseconds, varied enough to
hit every instruction, both backends, remote and multi-core targets, competing waiters,
reads that steer branches, DMAs on DMA and REGULAR semaphores, and out-of-range ids.
"""

from __future__ import annotations

import dataclasses

from hypothesis import strategies as st

from semcheck import ir
from semcheck.ir import Backend, Scope, SemKind, SemOrigin

LOC = ir.Loc("random.py", 1)


def plain_access(draw, loc: ir.Loc, region: ir.Region, device) -> ir.Instr:
    """A load, a store or an atomic read-modify-write (a GPU atomic add), of `region`;
    window-checked or not (`ir.Load.checked`: a TPU vector load or store, which faults with
    invalid_region where its region, from an input or a register, leaves the buffer)."""
    kind = draw(st.sampled_from(["load", "store", "atomic"]))
    checked = kind != "atomic" and draw(st.booleans())
    if kind == "load":
        return ir.Load(loc, region, device, checked=checked)
    return ir.Store(loc, region, device, atomic=kind == "atomic", checked=checked)


@st.composite
def protocols(  # noqa: C901
    draw, max_devices: int = 3, max_cores: int = 3, max_len: int = 5, with_inputs: bool = True,
    with_lifecycle: bool = True, with_mbarriers: bool = False,
    backends: tuple[Backend, ...] = (Backend.TPU, Backend.GPU),
):
    backend = draw(st.sampled_from(backends))
    devices = draw(st.integers(1, max_devices))
    # at most six threads, so the unreduced search stays small
    cores = draw(st.integers(1, max(1, min(max_cores, 6 // devices))))
    sems = [ir.SemDecl("s0", SemKind.REGULAR, draw(st.integers(1, 2)), SemOrigin.SCRATCH, Scope.CORE)]
    if draw(st.booleans()):  # two slots: copies with a semaphore each, or sharing one
        sems.append(ir.SemDecl("d0", SemKind.DMA, 2, SemOrigin.SCRATCH, Scope.CORE))
    if backend is Backend.GPU:  # shared by every block of a device: competing waiters
        sems.append(ir.SemDecl("g0", SemKind.GPU_GLOBAL, 1, SemOrigin.GLOBAL, Scope.DEVICE))
    if draw(st.booleans()):
        sems.append(ir.SemDecl("a0", SemKind.REGULAR, 1, SemOrigin.ARGUMENT, Scope.CORE))
    if with_mbarriers and backend is Backend.GPU:  # phase waits read the count (phase overrun)
        per_phase = draw(st.integers(1, 2))
        sems.append(ir.SemDecl("b0", SemKind.MBARRIER, 1, SemOrigin.SCOPED, Scope.CORE, arrivals_per_phase=per_phase))
    inputs = []
    if with_inputs and draw(st.integers(0, 4)) == 0:
        inputs.append(ir.Input("n", 0, draw(st.integers(0, 2)), LOC))
    regulars = [s for s in sems if s.kind is not SemKind.DMA]
    dmas = [s for s in sems if s.kind is SemKind.DMA]
    # an mbarrier as likely as the other semaphores together: a phase overrun needs a
    # phase wait and several arrivals on one barrier
    regulars += [s for s in regulars if s.arrivals_per_phase] * (len(regulars) - 2)

    def device_operand():
        choice = draw(st.integers(0, 9))
        if choice == 0:
            return devices  # one past the end: an invalid device id
        if choice <= 3:
            return None
        return draw(st.integers(0, devices - 1))

    def core_operand(decl):
        if decl.scope is Scope.DEVICE or draw(st.booleans()):
            return None
        return draw(st.integers(0, cores))  # `cores` itself is out of range

    def sem_ref(decl, remote_ok=True):
        index = draw(st.integers(0, decl.size - 1))
        if not remote_ok:
            return ir.SemRef(decl.name, index)
        return ir.SemRef(decl.name, index, device_operand(), core_operand(decl))

    def region():
        """Whole buffers, slots, halves of slots, empty windows of a slot, and a slot (or
        an empty window of one) chosen at run time; `shared` is one buffer per device that
        every core (block) of it loads and stores directly."""
        choice = draw(st.integers(0, 8))
        if choice == 7:
            return ir.Region("shared", (draw(st.integers(0, 1)),), (1,))
        if choice == 8:
            return ir.Region("shared")
        if choice == 0:
            return ir.Region("buf")
        if choice == 1:
            return ir.Region("mem")
        if choice == 2 and inputs:
            if draw(st.booleans()):  # an empty window at a slot chosen at run time
                return ir.Region("mem", (ir.Reg("n"), 0), (1, 0))
            return ir.Region("mem", (ir.Reg("n"),), (1,))
        slot = draw(st.integers(0, 1))
        if choice <= 3:
            return ir.Region("mem", (slot,), (1,))
        half = draw(st.integers(0, 1))
        return ir.Region("mem", (slot, 2 * half), (1, 2 if choice < 6 else 0))

    def amount():
        if inputs and draw(st.integers(0, 3)) == 0:
            return ir.Reg("n")
        return draw(st.integers(1, 2))

    lifecycle = with_lifecycle and backend is Backend.TPU and draw(st.integers(0, 2)) == 0
    ops = ["signal", "signal", "wait", "wait", "read", "dma", "dma", "access"]
    mbarrier = next((s for s in sems if s.arrivals_per_phase), None)
    if mbarrier is not None:  # a producer's arrivals, one per step of its unrolled loop
        ops.append("arrivals")
    threads = []
    for device in range(devices):
        for core in range(cores):
            body: list[ir.Instr] = []
            length = draw(st.integers(0, max_len))
            while len(body) < length:
                op = draw(st.sampled_from(ops))
                if op == "arrivals":
                    # two or three in a row: phases may complete before a consumer waits for
                    # the first, the phase overrun (a pipeline whose producer does not wait
                    # for its slot to be released)
                    assert mbarrier is not None
                    body += [ir.Signal(LOC, ir.SemRef(mbarrier.name), 1) for _ in range(draw(st.integers(2, 3)))]
                if op == "access":  # a third of them on a peer (a GPU remote_ref access)
                    body.append(plain_access(draw, LOC, region(), device_operand() if draw(st.integers(0, 2)) == 0 else None))
                if op == "signal":
                    decl = draw(st.sampled_from(regulars))
                    # most arrivals on an mbarrier are the block's own (a cluster peer's are remote)
                    remote_ok = not decl.arrivals_per_phase or draw(st.integers(0, 2)) == 0
                    body.append(ir.Signal(LOC, sem_ref(decl, remote_ok), amount()))
                elif op == "wait":
                    decl = draw(st.sampled_from(regulars))
                    # a phase wait never decrements (Mosaic GPU's barrier_wait)
                    decrement = not decl.arrivals_per_phase and draw(st.booleans())
                    body.append(ir.Wait(LOC, sem_ref(decl, remote_ok=False), amount(), decrement))
                elif op == "read":
                    decl = draw(st.sampled_from(regulars))
                    reg = f"r{len(body)}"
                    body.append(ir.Read(LOC, sem_ref(decl, remote_ok=False), reg))
                    # skip the next instruction when the count was at least k
                    k = draw(st.integers(0, 2))
                    body.append(ir.Branch(LOC, ir.BinOp("ge", ir.Reg(reg), k), len(body) + 2))
                elif op == "dma":
                    recv = draw(st.sampled_from(dmas or regulars))
                    index = draw(st.integers(0, recv.size - 1))
                    remote = draw(st.booleans())
                    nbytes = draw(st.sampled_from([0, 4, 8]))
                    # a local copy may have a send side too (a GPU TMA store: source read, then
                    # destination written, each counted on its own semaphore)
                    sided = remote or draw(st.integers(0, 3)) == 0
                    send = ir.SemRef(recv.name, index) if sided else None
                    target = device_operand() if remote else None
                    # a local sided copy may write a peer's memory (a GPU TMA store into a
                    # remote_ref: counted on the issuer's semaphores)
                    peer = device_operand() if sided and not remote and draw(st.integers(0, 2)) == 0 else None
                    # a local copy without a send side may read a peer's memory (a GPU TMA load
                    # from a remote_ref: counted on the issuer's barrier)
                    source = device_operand() if not sided and draw(st.integers(0, 2)) == 0 else None
                    body.append(ir.DmaStart(
                        LOC, region(), region(), ir.SemRef(recv.name, index), send, nbytes, target, dst_device=peer,
                        src_device=source,
                    ))
                    if recv.kind is SemKind.DMA and draw(st.booleans()):
                        side = ir.DmaSide.SEND if sided and draw(st.booleans()) else ir.DmaSide.RECV
                        body.append(ir.DmaWait(LOC, ir.SemRef(recv.name, index), draw(st.sampled_from([0, 4, 8])), side))
            # a branch may point one past the end of the body: that is the thread's exit
            body = [
                ir.Branch(i.loc, i.cond, min(i.target, len(body))) if isinstance(i, ir.Branch) else i
                for i in body
            ]
            if draw(st.integers(0, 7)) == 0:  # lowering stopped here: only the prefix is judged
                body.append(ir.Cut(LOC, "random cut"))
            if lifecycle:  # inside a kernel: entry first, exit last, jumps shifted by one
                body = (
                    [ir.KernelEntry(LOC)]
                    + [ir.Branch(i.loc, i.cond, i.target + 1) if isinstance(i, ir.Branch) else i for i in body]
                    + [ir.KernelExit(LOC)]
                )
            # every instruction on its own line, so findings at different places differ
            t = len(threads)
            body = [dataclasses.replace(i, loc=ir.Loc("random.py", 100 * t + pc + 1)) for pc, i in enumerate(body)]
            threads.append(ir.Thread(device, core, tuple(body)))
    return ir.Protocol(
        name="random", backend=backend, devices=devices, cores=cores, threads=tuple(threads),
        semaphores=tuple(sems), inputs=tuple(inputs), loc=LOC,
        buffers=(ir.BufferDecl("buf"), ir.BufferDecl("mem", (2, 4)), ir.BufferDecl("shared", (2, 4), scope=Scope.DEVICE)),
    )


@st.composite
def control_flow_protocols(draw, max_devices: int = 3, max_cores: int = 2, max_blocks: int = 4, spins: bool = False):
    """Random protocols with what `protocols()` leaves out: a source line per instruction (so
    finding keys tell waits apart), register arithmetic, if/else with jumps that join paths
    with different register values, loops (counted, bounded by an input, and retry loops
    steered by `semaphore_read`), semaphore indices, devices and cores computed from
    inputs and registers (valid for some values, faulting for others), loads, stores and
    copies of buffer slots chosen the same way, and kernel entry and exit.

    Every loop is bounded (at most 3 iterations, at most 2 loops per thread), so every
    execution terminates and the z3 engine's default unrolling covers it. With `spins`,
    a thread may also poll a semaphore with no bound (`while semaphore_read(s) < k: pass`),
    which spins for ever where nothing else adds to s: the explicit engine alone decides
    those (z3 says inconclusive).
    """
    backend = draw(st.sampled_from([Backend.TPU, Backend.GPU]))
    devices = draw(st.integers(1, max_devices))
    cores = draw(st.integers(1, max_cores))
    sems = [ir.SemDecl("s0", SemKind.REGULAR, draw(st.integers(1, 3)), SemOrigin.SCRATCH, Scope.CORE)]
    if draw(st.booleans()):
        sems.append(ir.SemDecl("d0", SemKind.DMA, draw(st.integers(1, 2)), SemOrigin.SCRATCH, Scope.CORE))
    if backend is Backend.GPU and draw(st.booleans()):
        sems.append(ir.SemDecl("g0", SemKind.GPU_GLOBAL, 1, SemOrigin.GLOBAL, Scope.DEVICE))
    if draw(st.booleans()):
        sems.append(ir.SemDecl("a0", SemKind.REGULAR, 1, SemOrigin.ARGUMENT, Scope.CORE))
    inputs = []
    for name in draw(st.sampled_from([(), ("n",), ("n",), ("n", "m")])):
        lo = draw(st.integers(-1, 1))
        inputs.append(ir.Input(name, lo, lo + draw(st.integers(0, 3)), LOC))
    regulars = [s for s in sems if s.kind is not SemKind.DMA]
    dmas = [s for s in sems if s.kind is SemKind.DMA]
    line = [1]

    def loc() -> ir.Loc:
        line[0] += 1
        return ir.Loc("random.py", line[0])

    threads = []
    for device in range(devices):
        for core in range(cores):
            threads.append(ir.Thread(device, core, _control_flow_body(
                draw, loc, backend, devices, cores, inputs, regulars, dmas, max_blocks, spins)))
    return ir.Protocol(
        name="random_control_flow", backend=backend, devices=devices, cores=cores,
        threads=tuple(threads), semaphores=tuple(sems), inputs=tuple(inputs), loc=LOC,
        buffers=(ir.BufferDecl("buf"), ir.BufferDecl("mem", (3, 4))),
    )


def _control_flow_body(draw, loc, backend, devices: int, cores: int, inputs: list, regulars: list, dmas: list,  # noqa: C901
                       max_blocks: int, spins: bool = False) -> tuple:
    """One thread's program for `control_flow_protocols` (a function of its own, so the
    helpers below close over this thread's body and registers, not a loop's)."""
    body: list = []  # instructions; branch/jump targets patched at the end
    registers: list[str] = []

    def value(small: bool = True) -> ir.Operand:
        """A constant, an input, a register, or arithmetic on them."""
        choices = ["const", "const"]
        if inputs:
            choices += ["input", "input_arith"]
        if registers:
            choices += ["register"]
        kind = draw(st.sampled_from(choices))
        if kind == "const":
            return draw(st.integers(0, 2 if small else 3))
        if kind == "input":
            return ir.Reg(draw(st.sampled_from(inputs)).name)
        if kind == "register":
            return ir.BinOp("min", ir.Reg(draw(st.sampled_from(registers))), 2)
        op = draw(st.sampled_from(["add", "sub", "mul", "floordiv", "mod", "max"]))
        return ir.BinOp(op, ir.Reg(draw(st.sampled_from(inputs)).name), draw(st.integers(-1, 2)))

    def index_operand(decl) -> ir.Operand:
        if decl.size == 1 and draw(st.integers(0, 3)):
            return 0
        if draw(st.booleans()):
            return draw(st.integers(0, decl.size - 1))
        return ir.BinOp("mod", value(), decl.size + draw(st.integers(0, 1)))

    def device_operand() -> ir.Operand | None:
        choice = draw(st.integers(0, 5))
        if choice <= 2:
            return None
        if choice == 3:
            return draw(st.integers(0, devices))  # `devices` is out of range
        return ir.BinOp("mod", value(), devices + draw(st.integers(0, 1)))

    def core_operand(decl) -> ir.Operand | None:
        if decl.scope is Scope.DEVICE or draw(st.integers(0, 2)):
            return None
        return draw(st.integers(0, cores)) if draw(st.booleans()) else value()

    def fresh_register(prefix: str) -> str:
        name = f"{prefix}{len(registers)}"
        registers.append(name)
        return name

    def region() -> ir.Region:
        """The whole buffer, or one row of `mem`, possibly computed (then it may lie
        outside the buffer, and overlap nothing)."""
        if draw(st.integers(0, 2)) == 0:
            return ir.Region("buf")
        row = draw(st.integers(0, 2)) if draw(st.booleans()) else value()
        return ir.Region("mem", (row,), (1,))

    def simple() -> None:
        op = draw(st.sampled_from(["signal", "signal", "wait", "wait", "read", "dma", "assign", "access"]))
        if op == "signal":
            decl = draw(st.sampled_from(regulars))
            ref = ir.SemRef(decl.name, index_operand(decl), device_operand(), core_operand(decl))
            body.append(ir.Signal(loc(), ref, value()))
        elif op == "wait":
            decl = draw(st.sampled_from(regulars))
            ref = ir.SemRef(decl.name, index_operand(decl))
            body.append(ir.Wait(loc(), ref, value(), draw(st.booleans())))
        elif op == "read":
            decl = draw(st.sampled_from(regulars))
            body.append(ir.Read(loc(), ir.SemRef(decl.name, index_operand(decl)), fresh_register("r")))
        elif op == "assign":
            body.append(ir.Assign(loc(), fresh_register("v"), value(small=False)))
        elif op == "access":
            device = device_operand() if draw(st.integers(0, 2)) == 0 else None
            body.append(plain_access(draw, loc(), region(), device))
        else:
            recv = draw(st.sampled_from(dmas or regulars))
            remote = draw(st.booleans())
            nbytes = draw(st.sampled_from([4, 8])) if draw(st.booleans()) else value()
            index = index_operand(recv)
            send = ir.SemRef(recv.name, index) if remote else None
            target = device_operand() if remote else None
            body.append(ir.DmaStart(
                loc(), region(), region(), ir.SemRef(recv.name, index), send, nbytes, target,
            ))
            if recv.kind is SemKind.DMA and draw(st.booleans()):
                side = ir.DmaSide.SEND if remote and draw(st.booleans()) else ir.DmaSide.RECV
                body.append(ir.DmaWait(loc(), ir.SemRef(recv.name, index), nbytes, side))

    def if_else() -> None:
        cond = ir.BinOp(draw(st.sampled_from(["lt", "ge", "eq"])), value(), draw(st.integers(0, 2)))
        branch = len(body)
        body.append(None)  # Branch to the else part, patched below
        simple()
        jump = None
        if draw(st.booleans()):
            jump = len(body)
            body.append(None)  # Jump over the else part
        else_start = len(body)
        simple()
        body[branch] = ir.Branch(loc(), cond, else_start)
        if jump is not None:
            body[jump] = ir.Jump(loc(), len(body))

    def counted_loop() -> None:
        counter = fresh_register("i")
        body.append(ir.Assign(loc(), counter, 0))
        top = len(body)
        for _ in range(draw(st.integers(1, 2))):
            simple()
        body.append(ir.Assign(loc(), counter, ir.BinOp("add", ir.Reg(counter), 1)))
        bound = draw(st.integers(1, 3)) if not inputs or draw(st.booleans()) else ir.BinOp(
            "min", ir.Reg(draw(st.sampled_from(inputs)).name), 3
        )
        body.append(ir.Branch(loc(), ir.BinOp("lt", ir.Reg(counter), bound), top))

    def retry_loop() -> None:
        """Poll a count with semaphore_read, at most twice, until it reaches k."""
        counter = fresh_register("i")
        decl = draw(st.sampled_from(regulars))
        body.append(ir.Assign(loc(), counter, 0))
        top = len(body)
        seen = fresh_register("r")
        body.append(ir.Read(loc(), ir.SemRef(decl.name, index_operand(decl)), seen))
        exit_branch = len(body)
        body.append(None)
        if draw(st.booleans()):
            simple()
        body.append(ir.Assign(loc(), counter, ir.BinOp("add", ir.Reg(counter), 1)))
        body.append(ir.Branch(loc(), ir.BinOp("lt", ir.Reg(counter), 2), top))
        body[exit_branch] = ir.Branch(loc(), ir.BinOp("ge", ir.Reg(seen), draw(st.integers(1, 2))), len(body))

    def spin() -> None:
        """Poll a count with semaphore_read until it reaches k, with no bound."""
        decl = draw(st.sampled_from(regulars))
        seen = fresh_register("r")
        top = len(body)
        body.append(ir.Read(loc(), ir.SemRef(decl.name, index_operand(decl)), seen))
        body.append(ir.Branch(loc(), ir.BinOp("lt", ir.Reg(seen), draw(st.integers(1, 2))), top))

    loops = 0
    lifecycle = backend is Backend.TPU and draw(st.integers(0, 2)) == 0
    if lifecycle:  # targets count from here: the entry is instruction 0
        body.append(ir.KernelEntry(loc()))
    for _ in range(draw(st.integers(0, max_blocks))):
        shape = draw(st.sampled_from(["simple", "simple", "simple", "if", "loop", "retry"] + ["spin"] * 3 * spins))
        if shape in ("loop", "retry", "spin") and loops < 2:
            loops += 1
            {"loop": counted_loop, "retry": retry_loop, "spin": spin}[shape]()
        elif shape == "if":
            if_else()
        else:
            simple()
    if lifecycle:
        body.append(ir.KernelExit(loc()))
    return tuple(body)


def _wrong_amount(wait: ir.Instr) -> ir.Instr:
    """A wait that asks for more than its matching signal or copy gives."""
    if isinstance(wait, ir.DmaWait):
        return dataclasses.replace(wait, nbytes=8)
    assert isinstance(wait, ir.Wait)
    return dataclasses.replace(wait, value=2)


def _mutate_one_device(draw, bodies: list[list[ir.Instr]], waits: tuple[type, ...]) -> None:
    """With probability 1/3, make one device's program differ from the others (in place):
    drop, repeat or move one instruction, or give one wait of a kind in `waits` a wrong
    amount. The almost symmetric protocols that result are where a reduction or a symmetry
    argument that is slightly too bold would miss a schedule."""
    if draw(st.integers(0, 2)) != 0:
        return
    d = draw(st.integers(0, len(bodies) - 1))
    body = bodies[d]
    k = draw(st.integers(0, len(body) - 1))
    mutation = draw(st.sampled_from(["drop", "repeat", "move", "amount"]))
    if mutation == "drop":
        del body[k]
    elif mutation == "repeat":
        body.insert(k, body[k])
    elif mutation == "move":
        body.insert(draw(st.integers(0, len(body) - 1)), body.pop(k))
    elif isinstance(body[k], waits):
        body[k] = _wrong_amount(body[k])


@st.composite
def ring_protocols(draw, max_devices: int = 3, max_steps: int = 2):
    """Ring collectives in the shape the reduction's guard rules are made for: per step, a
    device copies a slot to its right neighbour (one receive semaphore per step, or one
    shared by every step) and waits on both sides, with a barrier handshake first and loads
    and stores of the slots. Most draws are symmetric under rotation of the ring; a
    mutation (a dropped, repeated or moved instruction on one device, a wrong amount)
    makes some almost symmetric, which is where a reduction or a symmetry argument that is
    slightly too bold would miss a schedule."""
    devices = draw(st.integers(2, max_devices))
    steps = draw(st.integers(1, min(max_steps, devices)))
    shared_recv = draw(st.booleans())
    backend = Backend.TPU
    sems = [
        ir.SemDecl("barrier", SemKind.REGULAR, 1, SemOrigin.BARRIER, Scope.CORE),
        ir.SemDecl("send", SemKind.DMA, 1, SemOrigin.SCRATCH, Scope.CORE),
        ir.SemDecl("recv", SemKind.DMA, 1 if shared_recv else steps, SemOrigin.SCRATCH, Scope.CORE),
    ]
    handshake = draw(st.booleans())
    reads = draw(st.sampled_from(["none", "before_wait", "after_wait"]))
    lines = iter(range(1, 10_000))

    def loc() -> ir.Loc:
        return ir.Loc("ring.py", next(lines))

    def program(d: int) -> list[ir.Instr]:
        right, left = (d + 1) % devices, (d - 1) % devices
        body: list[ir.Instr] = []
        if handshake:
            body += [ir.Signal(loc(), ir.SemRef("barrier", 0, left)), ir.Signal(loc(), ir.SemRef("barrier", 0, right)),
                     ir.Wait(loc(), ir.SemRef("barrier"), 2, True)]
        for step in range(steps):
            slot = (d - step) % devices
            recv = ir.SemRef("recv", 0 if shared_recv else step)
            body.append(ir.DmaStart(
                loc(), ir.Region("out", (slot,), (1,)), ir.Region("out", (slot,), (1,)),
                ir.SemRef("recv", 0 if shared_recv else step), ir.SemRef("send"), 4, right,
            ))
            waits = [ir.DmaWait(loc(), ir.SemRef("send"), 4, ir.DmaSide.SEND), ir.DmaWait(loc(), recv, 4, ir.DmaSide.RECV)]
            if draw(st.booleans()):
                waits.reverse()
            body += waits
            landed = ir.Region("out", ((d - step - 1) % devices,), (1,))
            if reads == "before_wait":
                body.insert(len(body) - 1, ir.Load(loc(), landed))
            elif reads == "after_wait":
                body.append(ir.Load(loc(), landed))
        return body

    bodies = [program(d) for d in range(devices)]
    _mutate_one_device(draw, bodies, waits=(ir.DmaWait,))
    return ir.Protocol(
        name="random_ring", backend=backend, devices=devices, cores=1,
        semaphores=tuple(sems), buffers=(ir.BufferDecl("out", (devices, 4)),),
        threads=tuple(ir.Thread(d, 0, tuple(body)) for d, body in enumerate(bodies)),
    )


@st.composite
def capacity_ring_protocols(draw, max_devices: int = 3, max_steps: int = 3):
    """The tutorial ring all-reduce's shape (examples/tpu/allreduce_ring.py), where the
    counting cut of a whole stubborn set saves the most: per step a device tells its left
    neighbour that a slot is free (a REGULAR `capacity` semaphore there), copies its
    working slot locally, waits for its right neighbour's word, copies the slot on into the
    right neighbour's spare slot (one receive semaphore shared by every step), reads the
    local copy and waits on its copies. Optional parts (the handshake, the first send, the
    reads) and one mutated device (a dropped, repeated or moved instruction, a wrong amount)
    give the almost-right variants where a cut that is too bold would miss a schedule."""
    devices = draw(st.integers(2, max_devices))
    steps = draw(st.integers(1, max_steps))
    sems = [
        ir.SemDecl("local", SemKind.DMA, 1, SemOrigin.SCRATCH, Scope.CORE),
        ir.SemDecl("send", SemKind.DMA, 1, SemOrigin.SCRATCH, Scope.CORE),
        ir.SemDecl("recv", SemKind.DMA, 1, SemOrigin.SCRATCH, Scope.CORE),
        ir.SemDecl("capacity", SemKind.REGULAR, 1, SemOrigin.SCRATCH, Scope.CORE),
    ]
    capacity = draw(st.booleans()) or draw(st.booleans())  # mostly with the handshake
    first_send = draw(st.booleans())
    reads = draw(st.booleans())
    lines = iter(range(1, 10_000))

    def loc() -> ir.Loc:
        return ir.Loc("capacity_ring.py", next(lines))

    def program(d: int) -> list[ir.Instr]:
        right, left = (d + 1) % devices, (d - 1) % devices
        body: list[ir.Instr] = []
        if first_send:
            body += [
                ir.DmaStart(loc(), ir.Region("x", (0,), (1,)), ir.Region("slots", (0,), (1,)),
                            ir.SemRef("recv"), ir.SemRef("send"), 4, right),
                ir.DmaWait(loc(), ir.SemRef("send"), 4, ir.DmaSide.SEND),
                ir.DmaWait(loc(), ir.SemRef("recv"), 4, ir.DmaSide.RECV),
            ]
        for step in range(steps):
            work, spare = step % 2, 1 - step % 2
            if capacity:
                body.append(ir.Signal(loc(), ir.SemRef("capacity", 0, left)))
            body.append(ir.DmaStart(loc(), ir.Region("slots", (work,), (1,)), ir.Region("incoming", (0,), (1,)),
                                    ir.SemRef("local"), None, 4))
            if capacity:
                body.append(ir.Wait(loc(), ir.SemRef("capacity"), 1, True))
            body.append(ir.DmaStart(loc(), ir.Region("slots", (work,), (1,)), ir.Region("slots", (spare,), (1,)),
                                    ir.SemRef("recv"), ir.SemRef("send"), 4, right))
            body.append(ir.DmaWait(loc(), ir.SemRef("local"), 4, ir.DmaSide.RECV))
            if reads:
                body.append(ir.Load(loc(), ir.Region("incoming", (0,), (1,))))
            body += [ir.DmaWait(loc(), ir.SemRef("send"), 4, ir.DmaSide.SEND), ir.DmaWait(loc(), ir.SemRef("recv"), 4, ir.DmaSide.RECV)]
        return body

    bodies = [program(d) for d in range(devices)]
    _mutate_one_device(draw, bodies, waits=(ir.DmaWait, ir.Wait))
    return ir.Protocol(
        name="random_capacity_ring", backend=Backend.TPU, devices=devices, cores=1,
        semaphores=tuple(sems),
        buffers=(ir.BufferDecl("x", (1, 4)), ir.BufferDecl("slots", (2, 4)), ir.BufferDecl("incoming", (1, 4))),
        threads=tuple(ir.Thread(d, 0, tuple(body)) for d, body in enumerate(bodies)),
    )


@st.composite
def barrier_protocols(draw, max_devices: int = 3, max_rounds: int = 2, max_steps: int = 2):
    """The fused MoE's prologue shape (tpu-inference's fused MoE with the reduce-scatter in
    the kernel), where the joint counting cut and guard-stopped adders save the most: each
    device may zero-fill its whole output with a local copy, then per grid step signals
    every device's barrier semaphore and waits for all of them (one round or two), writes a
    row into its right neighbour's output and waits on both sides (and may read the row its
    left neighbour wrote). The zero fill's wait comes before the barrier (the fixed kernel),
    after the first one, or only after the rows have landed (the racy original); one device
    may be mutated. A cut that is too bold (a thread's additions cut short at a wait it
    could in fact pass) would miss the race or a stuck barrier.

    The steps repeat the handshake, as a kernel's grid steps do: unrolled on every device
    (as capture unrolls a grid: straight-line code, where the cuts apply, and a later
    step's barrier counts what the earlier ones added), or as a loop (a counter and a
    branch back) on every device or on one only (then its additions to the barrier are
    unbounded to the counting cut, and the straight-line devices beside it must not be cut
    as if they were bounded)."""
    devices = draw(st.integers(2, max_devices))
    rounds = draw(st.integers(1, max_rounds))
    steps = draw(st.integers(1, max_steps))
    looped = draw(st.sampled_from(["none", "all", "one"])) if steps > 1 else "none"
    zero = draw(st.booleans()) or draw(st.booleans())  # mostly with the zero fill
    # in a loop a wait placed inside the first step only cannot be written: before or at the end
    zero_wait = draw(st.sampled_from(["before_barrier", "after_barrier", "end"] if looped == "none"
                                     else ["before_barrier", "end"]))
    reads = draw(st.booleans())
    sems = [
        ir.SemDecl("barrier", SemKind.REGULAR, 1, SemOrigin.BARRIER, Scope.CORE),
        ir.SemDecl("zero", SemKind.DMA, 1, SemOrigin.SCRATCH, Scope.CORE),
        ir.SemDecl("send", SemKind.DMA, 1, SemOrigin.SCRATCH, Scope.CORE),
        ir.SemDecl("recv", SemKind.DMA, 1, SemOrigin.SCRATCH, Scope.CORE),
    ]
    lines = iter(range(1, 10_000))

    def loc() -> ir.Loc:
        return ir.Loc("barrier.py", next(lines))

    def zero_done() -> list[ir.Instr]:
        return [ir.DmaWait(loc(), ir.SemRef("zero"), 4, ir.DmaSide.RECV)] if zero else []

    def step(d: int, first: bool) -> list[ir.Instr]:
        """One grid step: the barrier rounds, then the row to the right neighbour."""
        right, left = (d + 1) % devices, (d - 1) % devices
        body: list[ir.Instr] = []
        for k in range(rounds):
            body += [ir.Signal(loc(), ir.SemRef("barrier", 0, p)) for p in range(devices)]
            body.append(ir.Wait(loc(), ir.SemRef("barrier"), devices, True))
            if first and k == 0 and zero_wait == "after_barrier":
                body += zero_done()
        body += [
            ir.DmaStart(loc(), ir.Region("stage", (0,), (1,)), ir.Region("out", (d,), (1,)),
                        ir.SemRef("recv"), ir.SemRef("send"), 4, right),
            ir.DmaWait(loc(), ir.SemRef("send"), 4, ir.DmaSide.SEND),
            ir.DmaWait(loc(), ir.SemRef("recv"), 4, ir.DmaSide.RECV),
        ]
        if reads:
            body.append(ir.Load(loc(), ir.Region("out", (left,), (1,))))
        return body

    def loops(d: int) -> bool:
        return looped == "all" or (looped == "one" and d == 0)

    # per device: (before the steps, the steps' code, after them); a looping device's steps'
    # code is one step, run `steps` times
    parts: list[tuple[list[ir.Instr], list[ir.Instr], list[ir.Instr]]] = []
    for d in range(devices):
        before: list[ir.Instr] = []
        if zero:
            before.append(ir.DmaStart(loc(), ir.Region("zeros", (0,), (devices,)), ir.Region("out", (0,), (devices,)),
                                      ir.SemRef("zero"), None, 4))
            if zero_wait == "before_barrier":
                before += zero_done()
        code = step(d, True) if loops(d) else [i for s in range(steps) for i in step(d, s == 0)]
        parts.append((before, code, zero_done() if zero_wait == "end" else []))
    # a mutation in a loop's body is in every step, as a mistake in a kernel's grid loop is
    bodies = [before + code + after if not loops(d) else code for d, (before, code, after) in enumerate(parts)]
    _mutate_one_device(draw, bodies, waits=(ir.Wait, ir.DmaWait))
    threads = []
    for d, ((before, _code, after), code) in enumerate(zip(parts, bodies)):
        if loops(d):
            top = len(before) + 1
            code = before + [ir.Assign(loc(), "i", 0)] + code + [
                ir.Assign(loc(), "i", ir.BinOp("add", ir.Reg("i"), 1)),
                ir.Branch(loc(), ir.BinOp("lt", ir.Reg("i"), steps), top),
            ] + after
        threads.append(ir.Thread(d, 0, tuple(code)))
    return ir.Protocol(
        name="random_barrier", backend=Backend.TPU, devices=devices, cores=1,
        semaphores=tuple(sems),
        buffers=(ir.BufferDecl("zeros", (devices,)), ir.BufferDecl("stage", (1,)), ir.BufferDecl("out", (devices,))),
        threads=tuple(threads),
    )


@st.composite
def invocation_protocols(draw, max_devices: int = 3, max_invocations: int = 3, max_ops: int = 3):  # noqa: C901
    """TPU kernels called more than once (`--invocations K`: every core runs entry, its
    body, exit, K times), with what the reduction must keep after a fault: faults of
    every kind (a semaphore index, device or core out of range; a checked load, store or
    copy window outside its buffer) in any invocation, and remote signals and copies into
    a peer's scratch semaphores that can reach it before it entered their invocation or
    after it left (`remote_before_entry`), beside handshakes that outlive a kernel (an
    argument semaphore, which no entry resets or checks, and a barrier semaphore that
    every invocation shares, with its ledger and early passes). A device that faults in
    one invocation and a peer that runs on into the next are where a reduction that took
    a fault for an action with no effect on its peers would lose the early arrival.

    Each invocation of a thread has its own body (a kernel whose program depends on the
    step: a mistake in one invocation only), and every instruction its own line, so the
    findings' keys name their sites."""
    devices = draw(st.integers(2, max_devices))
    cores = draw(st.integers(1, 2)) if devices == 2 else 1
    invocations = draw(st.sampled_from([2, 2, max_invocations, 1]))
    sems = (
        ir.SemDecl("s0", SemKind.REGULAR, 2, SemOrigin.SCRATCH, Scope.CORE),
        ir.SemDecl("d0", SemKind.DMA, 1, SemOrigin.SCRATCH, Scope.CORE),
        ir.SemDecl("a0", SemKind.REGULAR, 1, SemOrigin.ARGUMENT, Scope.CORE),
        ir.SemDecl("barrier", SemKind.REGULAR, 1, SemOrigin.BARRIER, Scope.CORE),
    )
    lines = iter(range(1, 10_000))

    def loc() -> ir.Loc:
        return ir.Loc("invocations.py", next(lines))

    def device(own: int) -> int | None:
        """Mostly a peer; sometimes the thread's own device, or one past the mesh."""
        choice = draw(st.integers(0, 9))
        if choice == 0:
            return devices  # invalid_device_id
        if choice <= 2:
            return None
        return draw(st.sampled_from([d for d in range(devices) if d != own] or [own]))

    def core() -> int | None:
        if cores == 1 and draw(st.integers(0, 5)):
            return None
        return draw(st.integers(0, cores))  # `cores` itself: invalid_core_index

    def row() -> int:
        return draw(st.sampled_from([0, 1, 2]))  # row 2 of a (2, 4) buffer: invalid_region

    def op(own: int) -> list[ir.Instr]:
        kind = draw(st.sampled_from(["signal", "signal", "wait", "wait", "dma", "access", "access"]))
        if kind == "signal":
            name = draw(st.sampled_from(["s0", "s0", "a0", "barrier"]))
            index = draw(st.sampled_from([0, 0, 1, 2])) if name == "s0" else 0  # 2: invalid_semaphore_index
            return [ir.Signal(loc(), ir.SemRef(name, index, device(own), core()), 1)]
        if kind == "wait":
            name = draw(st.sampled_from(["s0", "a0", "barrier"]))
            return [ir.Wait(loc(), ir.SemRef(name), 1, draw(st.integers(0, 3)) > 0)]
        if kind == "dma":
            target = device(own)
            copy: list[ir.Instr] = [ir.DmaStart(
                loc(), ir.Region("mem", (row(),), (1,)), ir.Region("mem", (row(),), (1,)),
                ir.SemRef("d0"), ir.SemRef("d0"), 4, target,
            )]
            if draw(st.booleans()):
                side = draw(st.sampled_from([ir.DmaSide.SEND, ir.DmaSide.RECV]))
                copy.append(ir.DmaWait(loc(), ir.SemRef("d0"), 4, side))
            return copy
        region = ir.Region("mem", (row(),), (1,))
        if draw(st.booleans()):
            return [ir.Load(loc(), region, checked=True)]
        return [ir.Store(loc(), region, checked=True)]

    def fault(own: int) -> list[ir.Instr]:
        """An instruction that faults, of each kind."""
        kind = draw(st.sampled_from(["load", "store", "index", "device", "core", "copy"]))
        if kind in ("load", "store"):
            access = ir.Load if kind == "load" else ir.Store
            return [access(loc(), ir.Region("mem", (2,), (1,)), checked=True)]
        if kind == "copy":
            rows = draw(st.sampled_from([(2, 0), (0, 2)]))
            return [ir.DmaStart(loc(), ir.Region("mem", (rows[0],), (1,)), ir.Region("mem", (rows[1],), (1,)),
                                ir.SemRef("d0"), ir.SemRef("d0"), 4, device(own))]
        ref = {"index": ir.SemRef("s0", 2), "device": ir.SemRef("s0", 0, devices), "core": ir.SemRef("s0", 0, None, cores)}
        return [ir.Signal(loc(), ref[kind], 1)]

    def arrival(target: int) -> list[ir.Instr]:
        """A remote signal or copy into `target`'s scratch semaphores."""
        if draw(st.booleans()):
            return [ir.Signal(loc(), ir.SemRef("s0", draw(st.integers(0, 1)), target), 1)]
        return [ir.DmaStart(loc(), ir.Region("mem", (0,), (1,)), ir.Region("mem", (1,), (1,)),
                            ir.SemRef("d0"), ir.SemRef("d0"), 4, target)]

    # per thread, per invocation, its ops (each a list of instructions)
    plan = [[[op(d) for _ in range(draw(st.integers(0, max_ops)))] for _ in range(invocations)]
            for d in range(devices) for _c in range(cores)]
    # Most draws: one device faults in an invocation and a peer, in the next, signals it or
    # copies into it (the review's question: is that early arrival still reported?).
    if invocations > 1 and draw(st.integers(0, 3)) > 0:
        faulting, peer = draw(st.permutations(range(devices)))[:2]
        at = draw(st.integers(0, invocations - 2))
        ops = plan[faulting * cores][at]
        ops.insert(draw(st.integers(0, len(ops))), fault(faulting))
        ops = plan[peer * cores][at + 1]
        ops.insert(draw(st.integers(0, len(ops))), arrival(faulting))
    # A handshake on the argument semaphore in each invocation (every device signals each
    # peer's first, then waits for all of them, among the ops or after them): a device
    # then runs into a later invocation only once each peer has signalled in this one, so
    # a fault after the handshake is the only thing left between a peer's early arrival
    # and the faulting core's next entry.
    handshake = draw(st.integers(0, 3)) > 0
    threads = []
    for t, invocation_ops in enumerate(plan):
        d, c = divmod(t, cores)
        body: list[ir.Instr] = []
        for ops in invocation_ops:
            if handshake:
                ops.insert(draw(st.integers(0, len(ops))), [ir.Wait(loc(), ir.SemRef("a0"), devices - 1, True)])
                ops.insert(0, [ir.Signal(loc(), ir.SemRef("a0", 0, peer), 1) for peer in range(devices) if peer != d])
            body += [ir.KernelEntry(loc()), *(i for instrs in ops for i in instrs), ir.KernelExit(loc())]
        threads.append(ir.Thread(d, c, tuple(body)))
    return ir.Protocol(
        name="random_invocations", backend=Backend.TPU, devices=devices, cores=cores, threads=tuple(threads),
        semaphores=sems, buffers=(ir.BufferDecl("mem", (2, 4)),), loc=LOC,
        cores_enter_together=draw(st.booleans()),
    )
