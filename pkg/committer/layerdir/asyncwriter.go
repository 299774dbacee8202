/*
Copyright 2026 The OpenSandbox Authors.

Licensed under the Apache License, Version 2.0 (the "License");
you may not use this file except in compliance with the License.
You may obtain a copy of the License at

    http://www.apache.org/licenses/LICENSE-2.0

Unless required by applicable law or agreed to in writing, software
distributed under the License is distributed on an "AS IS" BASIS,
WITHOUT WARRANTIES OR CONDITIONS OF ANY KIND, either express or implied.
See the License for the specific language governing permissions and
limitations under the License.
*/

package layerdir

import (
	"errors"
	"io"
	"sync/atomic"
)

const (
	asyncBlock  = 1 << 20
	asyncBlocks = 4
)

var errAsyncClosed = errors.New("write after close")

// asyncWriter writes to w in blocks on its own goroutine, so a throttled write
// (dirty pages, reclaim) stalls neither the tar, compression nor hashes.
type asyncWriter struct {
	w      io.Writer
	buf    []byte
	full   chan []byte
	free   chan []byte
	done   chan error
	failed atomic.Pointer[error]
	closed bool
}

// newAsyncWriter returns an asyncWriter to w; Close must be called.
func newAsyncWriter(w io.Writer) *asyncWriter {
	a := &asyncWriter{w: w, full: make(chan []byte, asyncBlocks), free: make(chan []byte, asyncBlocks), done: make(chan error, 1)}
	for range asyncBlocks - 1 {
		a.free <- make([]byte, 0, asyncBlock)
	}
	a.buf = make([]byte, 0, asyncBlock)
	go a.drain()
	return a
}

// drain writes the full blocks in order, after an error only recycling them.
func (a *asyncWriter) drain() {
	var err error
	for b := range a.full {
		if err == nil {
			if _, err = a.w.Write(b); err != nil {
				a.failed.Store(&err)
			}
		}
		a.free <- b[:0]
	}
	a.done <- err
}

// Write fails with an earlier block's error, so the producer stops soon.
func (a *asyncWriter) Write(p []byte) (int, error) {
	if a.closed {
		return 0, errAsyncClosed
	}
	if err := a.failed.Load(); err != nil {
		return 0, *err
	}
	n := len(p)
	for len(p) > 0 {
		k := min(len(p), cap(a.buf)-len(a.buf))
		a.buf = append(a.buf, p[:k]...)
		p = p[k:]
		if len(a.buf) == cap(a.buf) {
			a.full <- a.buf
			a.buf = <-a.free
		}
	}
	return n, nil
}

// Close writes what is left, waits for every write and returns the first error.
func (a *asyncWriter) Close() error {
	if a.closed {
		return errAsyncClosed
	}
	a.closed = true
	if len(a.buf) > 0 {
		a.full <- a.buf
	}
	close(a.full)
	return <-a.done
}
