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

package sandboxsnapshot

import (
	"testing"

	"k8s.io/apimachinery/pkg/types"
)

// TestOwnWritesStaleUntilCaughtUp checks that the versions a write replaced
// are stale, that any other version ends the entry (the informer caught up),
// and that forget ends it too.
func TestOwnWritesStaleUntilCaughtUp(t *testing.T) {
	w := newOwnWrites()
	key, other := types.NamespacedName{Namespace: "ns", Name: "a"}, types.NamespacedName{Namespace: "ns", Name: "b"}
	w.replaced(key, "1", "2")

	if !w.stale(key, "1") || !w.stale(key, "2") {
		t.Error("the replaced versions are not stale")
	}
	if w.stale(other, "1") {
		t.Error("another snapshot's version 1 is stale")
	}
	if w.stale(key, "3") {
		t.Error("version 3, written after, is stale")
	}
	if w.stale(key, "1") {
		t.Error("version 1 is still stale after the informer showed version 3")
	}
	if len(w.superseded) != 0 {
		t.Errorf("entries left: %v", w.superseded)
	}

	w.replaced(key, "4")
	w.forget(key)
	if w.stale(key, "4") {
		t.Error("version 4 is stale after forget")
	}
}
