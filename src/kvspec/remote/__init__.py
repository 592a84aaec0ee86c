"""Client-server speculative decoding (document 002, section 4.3): the target on a server
process, the drafter on a client process, talking over TCP with a versioned binary protocol
(`protocol`), through an emulated mobile link (`link`)."""
