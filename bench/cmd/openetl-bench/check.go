package main

import (
	"bytes"
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
	"time"
)

// checkJSONL counts the lines of a JSON-lines file (a peer's output) and
// sums their ids: the integer after the first `"id":` that follows the
// -after marker (e.g. `"after":` for Conduit's OpenCDC records). With
// -wait N it follows a growing file until N lines are complete and
// reports the seconds since -since (unix nanoseconds), which is how a
// peer that never exits on its own is timed; the script then stops it.
func checkJSONL(args []string) (*result, error) {
	fs := flag.NewFlagSet("check-jsonl", flag.ExitOnError)
	path := fs.String("file", "", "JSON-lines file")
	after := fs.String("after", "", "look for the id after this marker")
	want := fs.Int64("n", 0, "expected ids 1..n (sizes the distinct check)")
	wait := fs.Bool("wait", false, "follow the file until -n lines are complete")
	since := fs.Int64("since", 0, "with -wait: the peer's start, unix nanoseconds")
	timeout := fs.Duration("timeout", 30*time.Minute, "with -wait: give up after this")
	_ = fs.Parse(args)
	s := newIDSum(*want)
	marker, key := []byte(*after), []byte(`"id":`)
	deadline := time.Now().Add(*timeout)
	var f *os.File
	for {
		var err error
		if f, err = os.Open(*path); err == nil || !*wait || time.Now().After(deadline) {
			if err != nil {
				return nil, err
			}
			break
		}
		time.Sleep(100 * time.Millisecond)
	}
	defer f.Close()
	buf := make([]byte, 4<<20)
	var carry []byte
	line := func(l []byte) {
		if len(bytes.TrimSpace(l)) == 0 {
			return
		}
		if len(marker) > 0 {
			i := bytes.Index(l, marker)
			if i < 0 {
				s.Bad++
				return
			}
			l = l[i+len(marker):]
		}
		i := bytes.Index(l, key)
		if i < 0 {
			s.Bad++
			return
		}
		l = bytes.TrimLeft(l[i+len(key):], " ")
		var id int64
		j := 0
		for ; j < len(l) && l[j] >= '0' && l[j] <= '9'; j++ {
			id = id*10 + int64(l[j]-'0')
		}
		if j == 0 {
			s.Bad++
			return
		}
		s.add(id)
	}
	for {
		n, err := f.Read(buf)
		data := buf[:n]
		if len(carry) > 0 {
			data = append(carry, data...)
			carry = nil
		}
		for {
			i := bytes.IndexByte(data, '\n')
			if i < 0 {
				break
			}
			line(data[:i])
			data = data[i+1:]
		}
		if len(data) > 0 {
			carry = append([]byte(nil), data...)
		}
		if *wait && s.Count+s.Bad >= *want {
			break
		}
		if errors.Is(err, io.EOF) || n == 0 {
			if !*wait {
				if len(carry) > 0 {
					line(carry)
				}
				break
			}
			if time.Now().After(deadline) {
				return nil, fmt.Errorf("%d of %d lines after %s", s.Count, *want, *timeout)
			}
			time.Sleep(20 * time.Millisecond)
			continue
		}
		if err != nil {
			return nil, err
		}
	}
	r := &result{Rows: s.Count, Check: s}
	if *wait && *since > 0 {
		r.Seconds = time.Since(time.Unix(0, *since)).Seconds()
	}
	return r, nil
}
