"""The modelled world around the scheduler: DB pools, providers, business traffic.

Each element is driven by simpy but decides with the core's own classes (Bulkhead for FIFO
waiting, TokenBucket for a provider's limit, CircuitBreaker for the gateway). Elements count
what a capacity planner asks about; the sampler reads those counters into the timeline.
"""
