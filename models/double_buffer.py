"""Double-buffered producer/consumer pairs with a capacity semaphore: safe.

Devices pair up (0 with 1, 2 with 3, ...; with an odd count the last device sits out). The
producer streams ITEMS blocks into two landing slots on the consumer with remote DMAs. The
consumer owns the slots: it first grants two credits on the producer's `capacity`
semaphore (both slots are free), and returns one credit each time it has finished reading a
slot that will be refilled. The producer takes a credit before every copy, so it can never
overwrite a slot the consumer has not read yet, and each slot's receive semaphore carries
at most one copy at a time.

Why it is safe: credits granted = 2 + (ITEMS - 2) = ITEMS = credits taken; every copy's bytes
are waited exactly once on each side; so every count returns to 0 and no wait can starve.
"""
# semcheck: expect safe
from semcheck.model import DMA, ProtocolBuilder

ITEMS = 4


def model(devices: int):
    p = ProtocolBuilder("double_buffer", devices=devices, backend="tpu")
    capacity = p.semaphore("capacity")
    send_sem = p.semaphore("send_sem", DMA, size=2)
    recv_sem = p.semaphore("recv_sem", DMA, size=2)
    src = p.buffer("src", (ITEMS, 8, 128))
    slots = p.buffer("slots", (2, 8, 128))
    for producer in range(0, devices - 1, 2):
        consumer = producer + 1
        prod, cons = p.thread(producer), p.thread(consumer)
        cons.signal(capacity, 2, device=producer)  # both slots start free
        for i in range(ITEMS):
            slot = i % 2
            prod.wait(capacity, 1)  # a free slot on the consumer
            copy = prod.dma_start(src.region(i), slots.region(slot), recv_sem=recv_sem[slot],
                                  send_sem=send_sem[slot], device=consumer)
            copy.wait_send()
            cons.dma_wait(recv_sem[slot], copy._nbytes, side="recv")
            cons.load(slots.region(slot))
            if i + 2 < ITEMS:
                cons.signal(capacity, 1, device=producer)  # this slot may be refilled
    return p.build()
