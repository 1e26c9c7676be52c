//go:build cgo && linux && amd64

package engine

/*
#include <stdlib.h>
#include "openetl_engine.h"
*/
import "C"

import "unsafe"

// registerAvroPlan registers plan with the Rust engine's Avro fast path.
func registerAvroPlan(plan []byte) (uint32, error) {
	if len(plan) == 0 {
		return 0, ErrInvalidInput
	}
	var id C.uint32_t
	var cerr *C.char
	st := C.openetl_avro_plan((*C.uint8_t)(unsafe.Pointer(unsafe.SliceData(plan))), C.size_t(len(plan)), &id, &cerr)
	if st != 0 {
		return 0, statusError(st, cerr)
	}
	return uint32(id), nil
}
