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

// Command hog holds the MiB its argument names resident, filled with
// incompressible bytes, writes that number to /tmp/hog-ready, and sleeps
// until killed: the process bench-hibernate checkpoints.
package main

import (
	"encoding/binary"
	"fmt"
	"os"
	"runtime"
	"strconv"
	"time"
)

func main() {
	mib, err := strconv.Atoi(os.Args[len(os.Args)-1])
	if err != nil || mib <= 0 {
		fmt.Fprintln(os.Stderr, "usage: hog <MiB>")
		os.Exit(2)
	}
	buf := make([]byte, mib<<20)
	x := uint64(time.Now().UnixNano()) | 1
	for i := 0; i+8 <= len(buf); i += 8 {
		x ^= x << 13
		x ^= x >> 7
		x ^= x << 17
		binary.LittleEndian.PutUint64(buf[i:], x)
	}
	if err := os.WriteFile("/tmp/hog-ready", []byte(strconv.Itoa(mib)), 0o644); err != nil {
		fmt.Fprintln(os.Stderr, err)
		os.Exit(1)
	}
	for {
		time.Sleep(time.Hour)
		runtime.KeepAlive(buf)
	}
}
