"""Measuring a sweep: build each point, check it, time it (run, timing, bandwidth, device, tune, peers), count its
traffic and census (traffic_columns, static_resources), and write every row to the run folder as it is measured."""
