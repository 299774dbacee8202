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

// Package podinformer gives the controllers, through knative's injection,
// one shared informer of every pod, each kept with only what they read
// (imageref.PodTransform): the image deletion controller's references and
// the snapshot reconciler's pod look-ups share one watch and one cache.
package podinformer

import (
	"context"

	kubeinformers "k8s.io/client-go/informers"
	corev1informers "k8s.io/client-go/informers/core/v1"
	"k8s.io/client-go/kubernetes"
	kubeclient "knative.dev/pkg/client/injection/kube/client"
	"knative.dev/pkg/controller"
	"knative.dev/pkg/injection"
	"knative.dev/pkg/logging"

	"github.com/opensandbox-group/sandbox-snapshot-operator/pkg/imageref"
)

func init() {
	injection.Default.RegisterInformer(func(ctx context.Context) (context.Context, controller.Informer) {
		return WithInformer(ctx, kubeclient.Get(ctx))
	})
}

// key associates the informer with a context.
type key struct{}

// WithInformer adds to ctx an informer of the pods of kube, transformed.
func WithInformer(ctx context.Context, kube kubernetes.Interface) (context.Context, controller.Informer) {
	inf := kubeinformers.NewSharedInformerFactoryWithOptions(kube, controller.GetResyncPeriod(ctx),
		kubeinformers.WithTransform(imageref.PodTransform)).Core().V1().Pods()
	return context.WithValue(ctx, key{}, inf), inf.Informer()
}

// Get returns the informer WithInformer added to ctx.
func Get(ctx context.Context) corev1informers.PodInformer {
	inf, ok := ctx.Value(key{}).(corev1informers.PodInformer)
	if !ok {
		logging.FromContext(ctx).Panic("no pod informer in the context: import pkg/podinformer (or its fake)")
	}
	return inf
}
