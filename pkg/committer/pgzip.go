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

package committer

import (
	"bytes"
	"io"
	"sync"

	"github.com/klauspost/compress/gzip"
)

// parallelGzip compresses blocks of its input on several cores and writes
// them, in order, as consecutive gzip members: a valid gzip stream (RFC 1952
// allows several members; Go, pigz and containerd read them all).
type parallelGzip struct {
	w     io.Writer
	level int
	block int
	buf   []byte
	queue chan chan gzBlock
	done  chan error
	// blocks counts dispatched blocks: an empty input still needs one member.
	blocks int
}

type gzBlock struct {
	b   *bytes.Buffer
	err error
}

var gzBufPool = sync.Pool{New: func() any { return new(bytes.Buffer) }}

// newParallelGzip returns a writer compressing blocks of block bytes with up
// to workers goroutines.
func newParallelGzip(w io.Writer, level, block, workers int) *parallelGzip {
	z := &parallelGzip{w: w, level: level, block: block, queue: make(chan chan gzBlock, workers), done: make(chan error, 1)}
	go z.drain()
	return z
}

func (z *parallelGzip) drain() {
	var err error
	for ch := range z.queue {
		r := <-ch
		if err == nil {
			err = r.err
		}
		if err == nil {
			_, err = z.w.Write(r.b.Bytes())
		}
		r.b.Reset()
		gzBufPool.Put(r.b)
	}
	z.done <- err
}

// Write implements io.Writer.
func (z *parallelGzip) Write(p []byte) (int, error) {
	n := len(p)
	for len(p) > 0 {
		if z.buf == nil {
			z.buf = make([]byte, 0, z.block)
		}
		k := min(len(p), z.block-len(z.buf))
		z.buf = append(z.buf, p[:k]...)
		p = p[k:]
		if len(z.buf) == z.block {
			z.dispatch()
		}
	}
	return n, nil
}

func (z *parallelGzip) dispatch() {
	in := z.buf
	z.buf = nil
	z.blocks++
	ch := make(chan gzBlock, 1)
	z.queue <- ch
	go func() {
		b := gzBufPool.Get().(*bytes.Buffer)
		zw, err := gzip.NewWriterLevel(b, z.level)
		if err == nil {
			if _, err = zw.Write(in); err == nil {
				err = zw.Close()
			}
		}
		ch <- gzBlock{b: b, err: err}
	}()
}

// Close compresses what is buffered and waits for every block to be written.
func (z *parallelGzip) Close() error {
	if len(z.buf) > 0 || z.blocks == 0 {
		z.dispatch()
	}
	close(z.queue)
	return <-z.done
}
