package kube

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"time"

	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/util/wait"
	utilyaml "k8s.io/apimachinery/pkg/util/yaml"
	"k8s.io/client-go/discovery/cached/memory"
	"k8s.io/client-go/dynamic"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/restmapper"
)

// FieldManager is the harness's name in the objects' managedFields.
const FieldManager = "ovs-in-docker"

// Apply server-side applies every object of the YAML documents (a manifest
// as kubectl apply -f takes it), in order, and says what it did in logf.
// A kind a CustomResourceDefinition of the same manifest defines is found
// once the definition is served.
func Apply(ctx context.Context, kubeconfig string, manifest []byte, logf func(string, ...any)) error {
	cfg, err := restConfig(kubeconfig)
	if err != nil {
		return err
	}
	c, err := kubernetes.NewForConfig(cfg)
	if err != nil {
		return err
	}
	dyn, err := dynamic.NewForConfig(cfg)
	if err != nil {
		return err
	}
	cache := memory.NewMemCacheClient(c.Discovery())
	mapper := restmapper.NewDeferredDiscoveryRESTMapper(cache)
	dec := utilyaml.NewYAMLOrJSONDecoder(bytes.NewReader(manifest), 4096)
	for {
		var obj unstructured.Unstructured
		if err := dec.Decode(&obj.Object); errors.Is(err, io.EOF) {
			return nil
		} else if err != nil {
			return fmt.Errorf("decoding the manifest: %w", err)
		}
		if len(obj.Object) == 0 {
			continue // an empty document
		}
		gvk := obj.GroupVersionKind()
		var mapping *meta.RESTMapping
		if err := wait.PollUntilContextTimeout(ctx, 500*time.Millisecond, time.Minute, true, func(context.Context) (bool, error) {
			mapping, err = mapper.RESTMapping(gvk.GroupKind(), gvk.Version)
			if meta.IsNoMatchError(err) {
				mapper.Reset() // a definition applied just before: ask discovery again
				return false, nil
			}
			return err == nil, err
		}); err != nil {
			return fmt.Errorf("%s %s: the API server serves no such kind: %w", gvk.Kind, obj.GetName(), err)
		}
		ri := dynamic.ResourceInterface(dyn.Resource(mapping.Resource))
		if mapping.Scope.Name() == meta.RESTScopeNameNamespace {
			ns := obj.GetNamespace()
			if ns == "" {
				ns = "default"
			}
			ri = dyn.Resource(mapping.Resource).Namespace(ns)
		}
		if _, err := ri.Apply(ctx, obj.GetName(), &obj, metav1.ApplyOptions{FieldManager: FieldManager, Force: true}); err != nil {
			return fmt.Errorf("applying %s %s: %w", gvk.Kind, obj.GetName(), err)
		}
		logf("%s/%s applied", mapping.Resource.Resource, obj.GetName())
	}
}
