"""The values of an MH chain: its keys, its state, its metrics and its trace records (how its
transitions run is :mod:`presto_sgl.execution`)."""
