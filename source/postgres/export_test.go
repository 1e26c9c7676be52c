package postgres

// ForceProtocol makes src use pgoutput protocol version v (2: with
// streaming of transactions in progress, kept in memory up to bufBytes,
// then in a temporary file), which Config does not offer yet. For tests
// of the protocol 2 path.
func ForceProtocol(src *Source, v, bufBytes int) { src.proto, src.txnBuf = v, bufBytes }
