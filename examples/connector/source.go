package main

import (
	"bufio"
	"bytes"
	"context"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"time"

	"github.com/openetl/etl/source"
)

// Files is a source that reads a directory of NDJSON files: each file
// NAME.ndjson is a stream NAME of JSON documents, one per line, read by
// one split. The files may only grow (lines appended at the end), which
// makes the source's replay exact: a split's resume state is the byte
// offset after the last line it emitted, and each record's seq is the
// offset where its line starts. Blank lines are skipped. A last line
// without its newline is taken as still being written: it is read once
// its newline is there.
type Files struct {
	Dir string
}

// Discover reports a stream per *.ndjson file, in name order.
func (s *Files) Discover(ctx context.Context) (source.Catalog, error) {
	paths, err := filepath.Glob(filepath.Join(s.Dir, "*.ndjson"))
	if err != nil {
		return source.Catalog{}, err
	}
	var cat source.Catalog
	for _, p := range paths {
		name := strings.TrimSuffix(filepath.Base(p), ".ndjson")
		cat.Streams = append(cat.Streams, source.Stream{Name: name, Format: source.FormatJSON})
	}
	return cat, nil
}

// Replay is exact: files are only appended to.
func (s *Files) Replay() source.Replay { return source.ReplayExact }

// Open returns a split per stream, starting at its saved offset.
func (s *Files) Open(ctx context.Context, streams []string, resume map[source.SplitID][]byte) ([]source.Split, error) {
	splits := make([]source.Split, 0, len(streams))
	for _, name := range streams {
		sp := &fileSplit{stream: name, path: filepath.Join(s.Dir, name+".ndjson")}
		if state, ok := resume[source.SplitID(name)]; ok {
			off, err := strconv.ParseInt(string(state), 10, 64)
			if err != nil || off < 0 {
				return nil, fmt.Errorf("files: stream %s: resume state %q is not an offset", name, state)
			}
			sp.offset = off
		}
		splits = append(splits, sp)
	}
	return splits, nil
}

// pollInterval is how often an unbounded Read looks for new lines at
// the end of its file.
const pollInterval = 100 * time.Millisecond

type fileSplit struct {
	stream, path string
	offset       int64 // where Read starts
}

func (sp *fileSplit) ID() source.SplitID { return source.SplitID(sp.stream) }

func (sp *fileSplit) Read(ctx context.Context, e source.Emitter, bounded bool) error {
	f, err := os.Open(sp.path)
	if err != nil {
		return err
	}
	defer f.Close()
	fi, err := f.Stat()
	if err != nil {
		return err
	}
	// A resume state must point at the start of a line of this file.
	var prev [1]byte
	if sp.offset > fi.Size() {
		return fmt.Errorf("files: %s: resume offset %d is past the end (%d bytes): was the file replaced?", sp.path, sp.offset, fi.Size())
	} else if sp.offset > 0 {
		if _, err := f.ReadAt(prev[:], sp.offset-1); err != nil || prev[0] != '\n' {
			return fmt.Errorf("files: %s: resume offset %d is not at the start of a line", sp.path, sp.offset)
		}
	}
	off, end := sp.offset, fi.Size() // a bounded Read stops at the size it found
	r := bufio.NewReader(io.NewSectionReader(f, off, 1<<62))
	state := func() []byte { return strconv.AppendInt(nil, off, 10) }
	for !bounded || off < end {
		if err := ctx.Err(); err != nil {
			return err
		}
		line, err := r.ReadBytes('\n')
		if err == io.EOF {
			if bounded {
				break
			}
			select { // wait for more lines, then read the unfinished one again
			case <-ctx.Done():
				return ctx.Err()
			case <-time.After(pollInterval):
			}
			r.Reset(io.NewSectionReader(f, off, 1<<62))
			continue
		} else if err != nil {
			return err
		}
		if doc := bytes.TrimSpace(line); len(doc) > 0 {
			if err := e.Record(sp.stream, source.OpInsert, off, nil, doc); err != nil {
				return err
			}
		}
		off += int64(len(line))
		if err := e.ResumePoint(state()); err != nil {
			return err
		}
	}
	// The end must be a place to resume from, also when nothing was read.
	if off == sp.offset {
		return e.ResumePoint(state())
	}
	return nil
}
