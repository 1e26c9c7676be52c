package mysql

// SetStandardDecode makes the source decode every rows event with
// go-mysql's decoder (not decode.go), for tests comparing the two.
func SetStandardDecode(s *Source, on bool) { s.standardDecode = on }
