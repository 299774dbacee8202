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

package main

import "testing"

func TestOpenSandboxWorkers(t *testing.T) {
	for line, want := range map[string]bool{
		`{"level":"info","msg":"Starting workers","controller":"sandboxsnapshot","worker count":1}`: true,
		`{"level":"info","msg":"Starting workers","controller":"batchsandbox","worker count":32}`:   false,
		`{"level":"info","msg":"Starting EventSource","controller":"sandboxsnapshot"}`:              false,
		"{\"msg\":\"Starting workers\"}\n{\"controller\":\"sandboxsnapshot\"}":                      false,
	} {
		if got := openSandboxWorkers.MatchString(line); got != want {
			t.Errorf("match of %q = %v, want %v", line, got, want)
		}
	}
}
