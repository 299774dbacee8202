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

package localcontroller

import (
	"testing"

	"github.com/google/go-cmp/cmp"
)

func TestLeaders(t *testing.T) {
	logs := map[int][]byte{
		1: []byte(`{"msg":"Starting controllers"}` + "\n" + `{"msg":"acquired lease","identity":"ctl-local-1_aaa"}`),
		2: []byte(`{"msg":"Starting controllers","identity":"ctl-local-2_bbb"}`),
		3: []byte(`{"msg":"Starting controllers"}`),
	}
	for _, tc := range []struct {
		name    string
		holders []string
		want    []int
	}{
		{name: "one leader", holders: []string{"ctl-local-2_bbb"}, want: []int{2}},
		{name: "buckets split", holders: []string{"ctl-local-2_bbb", "ctl-local-1_aaa", "ctl-local-2_bbb"}, want: []int{1, 2}},
		// A killed run of instance 1 still holds the Lease until it expires.
		{name: "a previous run", holders: []string{"ctl-local-1_zzz"}},
		// A released Lease has an empty holder, which is in every log.
		{name: "released", holders: []string{""}},
		{name: "no leases"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			if diff := cmp.Diff(tc.want, leaders(tc.holders, logs)); diff != "" {
				t.Errorf("leaders (-want +got):\n%s", diff)
			}
		})
	}
}

func TestListeners(t *testing.T) {
	// /proc/net/tcp: header, then sl, local, remote, state, queues, tr, retrnsmt, uid, timeout, inode.
	table := []byte(`  sl  local_address rem_address   st tx_queue rx_queue tr tm->when retrnsmt   uid  timeout inode
   0: 00000000:1F90 00000000:0000 0A 00000000:00000000 00:00000000 00000000     0        0 111 1 0 100 0 0 10 0
   1: 0100007F:1F90 0100007F:C350 01 00000000:00000000 00:00000000 00000000     0        0 222 1 0 20 4 30 10 -1
   2: 0100007F:4E20 00000000:0000 0A 00000000:00000000 00:00000000 00000000     0        0 333 1 0 100 0 0 10 0
`)
	if diff := cmp.Diff([]string{"111"}, listeners(table, 8080)); diff != "" {
		t.Errorf("listeners on 8080 (-want +got):\n%s", diff)
	}
	if diff := cmp.Diff([]string{"333"}, listeners(table, 20000)); diff != "" {
		t.Errorf("listeners on 20000 (-want +got):\n%s", diff)
	}
	if got := listeners(table, 9090); got != nil {
		t.Errorf("listeners on 9090 = %v, want none", got)
	}
}
