package nodeconfig_test

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"os"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/milvus-io/milvus-sdk-go/v2/client"

	"github.com/troupe-run/troupe/internal/nodeconfig"
	"github.com/troupe-run/troupe/knowledge"
	"github.com/troupe-run/troupe/memory"
	"github.com/troupe-run/troupe/vectorstore"
)

// The memories and knowledge bases of a configuration with milvus_prefix keep
// their vectors in Milvus collections named with it: two deployments with their
// own prefixes share one Milvus without sharing a collection.
func TestMilvusPrefixNamesCollections(t *testing.T) {
	addr := os.Getenv("TROUPE_TEST_MILVUS")
	if addr == "" {
		t.Skip("TROUPE_TEST_MILVUS is not set: start Milvus (deploy/milvus.sh start && deploy/milvus.sh wait) and set TROUPE_TEST_MILVUS=127.0.0.1:19530 to run this test")
	}
	ctx, cancel := context.WithTimeout(t.Context(), 2*time.Minute)
	defer cancel()
	b := make([]byte, 4)
	_, _ = rand.Read(b)
	prefix := "prefix_test_" + hex.EncodeToString(b) + "_"
	c, err := client.NewClient(ctx, client.Config{Address: addr})
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	t.Cleanup(func() {
		colls, _ := c.ListCollections(context.Background())
		for _, coll := range colls {
			if strings.HasPrefix(coll.Name, prefix) {
				_ = c.DropCollection(context.Background(), coll.Name)
			}
		}
	})

	fc := nodeconfig.File{MilvusPrefix: prefix}
	mem, closeMem, _, err := fc.MemoryConfig(ctx, addr)
	if err != nil {
		t.Fatal(err)
	}
	defer closeMem()
	kb, closeKB, _, err := fc.KnowledgeConfig(ctx, addr)
	if err != nil {
		t.Fatal(err)
	}
	defer closeKB()
	item := []vectorstore.Item{{ID: "a", Vector: []float32{1, 0}}}
	memColl, kbColl := memory.Collection(memory.Semantic, memory.Text), knowledge.Collection("docs")
	if err := mem.Vectors.Upsert(ctx, memColl, item); err != nil {
		t.Fatal(err)
	}
	if err := kb.Vectors.Upsert(ctx, kbColl, item); err != nil {
		t.Fatal(err)
	}
	colls, err := c.ListCollections(ctx)
	if err != nil {
		t.Fatal(err)
	}
	var names []string
	for _, coll := range colls {
		if strings.HasPrefix(coll.Name, prefix) {
			names = append(names, coll.Name)
		}
	}
	slices.Sort(names)
	if want := []string{prefix + kbColl, prefix + memColl}; !slices.Equal(names, want) {
		t.Errorf("collections under the prefix: %v, want %v", names, want)
	}
}
