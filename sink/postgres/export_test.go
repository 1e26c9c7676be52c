package postgres

// SetMerge makes d apply merged tables with MERGE (true) or with INSERT
// ... ON CONFLICT, as on servers before PostgreSQL 15 (false): the
// tests run both on one server.
func SetMerge(d *Destination, on bool) { d.merge = on }
