package etl

import (
	"errors"
	"reflect"
	"testing"
	"time"

	"github.com/openetl/etl/internal/runner"
)

// etl's Event, Status, Progress, Result and their parts are the runner's,
// field for field, copied by eventOf, statusOf and progressOf: a field
// the runner gains must reach the host too.
func TestPublicTypesMirrorTheRunner(t *testing.T) {
	for _, pair := range [][2]any{
		{Event{}, runner.Event{}}, {Status{}, runner.Status{}}, {StreamStatus{}, runner.StreamStatus{}},
		{SplitStatus{}, runner.SplitStatus{}}, {Progress{}, runner.Progress{}}, {Result{}, runner.Result{}},
	} {
		pub, in := reflect.TypeOf(pair[0]), reflect.TypeOf(pair[1])
		if pub.NumField() != in.NumField() {
			t.Errorf("etl.%s has %d fields, the runner's %d", pub.Name(), pub.NumField(), in.NumField())
			continue
		}
		for i := range pub.NumField() {
			if pub.Field(i).Name != in.Field(i).Name {
				t.Errorf("etl.%s field %d is %s, the runner's %s", pub.Name(), i, pub.Field(i).Name, in.Field(i).Name)
			}
		}
	}
	// Every field is copied: set each to a non-zero value and see it
	// come out of the conversion.
	var e runner.Event
	fill(reflect.ValueOf(&e).Elem())
	checkFilled(t, "eventOf", reflect.ValueOf(eventOf(e)))
	var s runner.Status
	fill(reflect.ValueOf(&s).Elem())
	checkFilled(t, "statusOf", reflect.ValueOf(statusOf(s)))
	var p runner.Progress
	fill(reflect.ValueOf(&p).Elem())
	checkFilled(t, "progressOf", reflect.ValueOf(progressOf(p)))
}

func fill(v reflect.Value) {
	for i := range v.NumField() {
		f := v.Field(i)
		if !f.CanSet() {
			continue
		}
		switch f.Kind() {
		case reflect.String:
			f.SetString("x")
		case reflect.Bool:
			f.SetBool(true)
		case reflect.Int, reflect.Int64:
			f.SetInt(1)
		case reflect.Uint8, reflect.Uint64:
			f.SetUint(1)
		case reflect.Map:
			m := reflect.MakeMap(f.Type())
			m.SetMapIndex(reflect.New(f.Type().Key()).Elem(), reflect.New(f.Type().Elem()).Elem())
			f.Set(m)
		case reflect.Slice:
			f.Set(reflect.MakeSlice(f.Type(), 1, 1))
		case reflect.Struct:
			if f.Type().String() == "time.Time" {
				f.Set(reflect.ValueOf(testTime))
			} else {
				fill(f) // sink.Collected, say
			}
		case reflect.Interface:
			f.Set(reflect.ValueOf(errTest))
		}
	}
}

func checkFilled(t *testing.T, what string, v reflect.Value) {
	t.Helper()
	for i := range v.NumField() {
		if v.Field(i).IsZero() {
			t.Errorf("%s drops %s.%s", what, v.Type().Name(), v.Type().Field(i).Name)
		}
	}
}

var (
	testTime = time.Date(2026, 1, 2, 3, 4, 5, 0, time.UTC)
	errTest  = errors.New("test")
)
