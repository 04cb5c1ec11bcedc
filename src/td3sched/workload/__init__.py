"""Pod streams built from traces: arrivals, lifetimes, requests, limits, QoS and usage profiles."""
