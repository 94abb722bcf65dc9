package kube

import (
	"context"
	"fmt"
	"time"

	authv1 "k8s.io/api/authentication/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apimachinery/pkg/util/wait"
	"k8s.io/client-go/dynamic"
	"k8s.io/client-go/tools/clientcmd"
	clientcmdapi "k8s.io/client-go/tools/clientcmd/api"
)

var crds = schema.GroupVersionResource{Group: "apiextensions.k8s.io", Version: "v1", Resource: "customresourcedefinitions"}

// WaitEstablished waits until the CustomResourceDefinition NAME has its
// Established condition True (its kind is served), or ctx ends.
func WaitEstablished(ctx context.Context, kubeconfig, name string) error {
	cfg, err := restConfig(kubeconfig)
	if err != nil {
		return err
	}
	dyn, err := dynamic.NewForConfig(cfg)
	if err != nil {
		return err
	}
	var last error
	err = wait.PollUntilContextCancel(ctx, 300*time.Millisecond, true, func(ctx context.Context) (bool, error) {
		obj, err := dyn.Resource(crds).Get(ctx, name, metav1.GetOptions{})
		if last = err; err != nil {
			return false, nil // not yet there, or the API server busy
		}
		conds, _, _ := unstructured.NestedSlice(obj.Object, "status", "conditions")
		for _, c := range conds {
			if m, ok := c.(map[string]any); ok && m["type"] == "Established" && m["status"] == "True" {
				return true, nil
			}
		}
		last = fmt.Errorf("not Established")
		return false, nil
	})
	if err != nil {
		return fmt.Errorf("customresourcedefinition %s: %w (last: %v)", name, err, last)
	}
	return nil
}

// ServiceAccountKubeconfig is a kubeconfig for the API server of the
// admin's kubeconfig (its server and CA), whose user is a token of the
// ServiceAccount NAMESPACE/NAME valid for ttl (TokenRequest).
func ServiceAccountKubeconfig(ctx context.Context, kubeconfig, namespace, name string, ttl time.Duration) ([]byte, error) {
	admin, err := clientcmd.LoadFromFile(kubeconfig)
	if err != nil {
		return nil, fmt.Errorf("kubeconfig %s: %w", kubeconfig, err)
	}
	// The CA by content: the admin's kubeconfig may name it by path.
	if err := clientcmdapi.FlattenConfig(admin); err != nil {
		return nil, fmt.Errorf("kubeconfig %s: %w", kubeconfig, err)
	}
	cur, ok := admin.Contexts[admin.CurrentContext]
	if !ok || admin.Clusters[cur.Cluster] == nil {
		return nil, fmt.Errorf("kubeconfig %s: no cluster for its current context %q", kubeconfig, admin.CurrentContext)
	}
	cluster := admin.Clusters[cur.Cluster]
	c, err := Client(kubeconfig)
	if err != nil {
		return nil, err
	}
	secs := int64(ttl.Seconds())
	tr, err := c.CoreV1().ServiceAccounts(namespace).CreateToken(ctx, name,
		&authv1.TokenRequest{Spec: authv1.TokenRequestSpec{ExpirationSeconds: &secs}}, metav1.CreateOptions{})
	if err != nil {
		return nil, fmt.Errorf("a token of serviceaccount %s/%s: %w", namespace, name, err)
	}
	kc := clientcmdapi.NewConfig()
	kc.Clusters["local"] = &clientcmdapi.Cluster{Server: cluster.Server, CertificateAuthorityData: cluster.CertificateAuthorityData}
	kc.AuthInfos[name] = &clientcmdapi.AuthInfo{Token: tr.Status.Token}
	kc.Contexts[name+"-context"] = &clientcmdapi.Context{Cluster: "local", AuthInfo: name}
	kc.CurrentContext = name + "-context"
	return clientcmd.Write(*kc)
}
