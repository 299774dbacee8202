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
	"strings"
	"testing"

	"github.com/google/go-cmp/cmp"
)

func TestParse(t *testing.T) {
	for _, tc := range []struct {
		args    []string
		want    Command
		wantErr string
	}{
		{args: []string{"start"}, want: Command{Verb: "start", Instance: 1}},
		{args: []string{"start", "2"}, want: Command{Verb: "start", Instance: 2}},
		{args: []string{"restart"}, want: Command{Verb: "restart", Instance: 1}},
		{args: []string{"stop"}, want: Command{Verb: "stop"}},
		{args: []string{"stop", "3"}, want: Command{Verb: "stop", Instance: 3}},
		{args: []string{"kill"}, want: Command{Verb: "kill"}},
		{args: []string{"kill", "1"}, want: Command{Verb: "kill", Instance: 1}},
		{args: []string{"status"}, want: Command{Verb: "status"}},
		{args: []string{"leader"}, want: Command{Verb: "leader"}},
		{args: []string{WatchdogVerb, "2", "100", "200"}, want: Command{Verb: WatchdogVerb, Instance: 2, ControllerPID: 100, APIServerPID: 200}},
		{args: nil, wantErr: "usage"},
		{args: []string{"begin"}, wantErr: "usage"},
		{args: []string{"status", "1"}, wantErr: "usage"},
		{args: []string{"start", "1", "2"}, wantErr: "usage"},
		{args: []string{"start", "0"}, wantErr: `instance must be a positive number, not "0"`},
		{args: []string{"kill", "-1"}, wantErr: "positive number"},
		{args: []string{"stop", "01"}, wantErr: "positive number"},
		{args: []string{"stop", "x"}, wantErr: "positive number"},
		{args: []string{WatchdogVerb, "1", "100"}, wantErr: "usage"},
		{args: []string{WatchdogVerb, "1", "x", "200"}, wantErr: "controller pid"},
	} {
		t.Run(strings.Join(tc.args, " "), func(t *testing.T) {
			got, err := Parse(tc.args)
			if tc.wantErr != "" {
				if err == nil || !strings.Contains(err.Error(), tc.wantErr) {
					t.Errorf("Parse error = %v, want one with %q", err, tc.wantErr)
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			if diff := cmp.Diff(tc.want, got); diff != "" {
				t.Errorf("Parse (-want +got):\n%s", diff)
			}
		})
	}
}
