package dest

import (
	"context"
	"encoding/binary"
	"fmt"
	"io"
	"slices"

	"github.com/apache/arrow-go/v18/arrow/array"
	"github.com/apache/arrow-go/v18/arrow/memory"
	"github.com/apache/arrow-go/v18/parquet"
	"github.com/apache/arrow-go/v18/parquet/compress"
	"github.com/apache/arrow-go/v18/parquet/pqarrow"
	"github.com/apache/iceberg-go"
	iceio "github.com/apache/iceberg-go/io"
	"github.com/apache/iceberg-go/table"
	"github.com/apache/iceberg-go/table/dv"
	"github.com/google/uuid"
)

// writePositionDeletes writes the deletes of rows that later chunks replaced, one delete file per data file
// (file-scoped: readers match it to that file by path alone). Format v3 tables get deletion vectors through
// iceberg-go's DVWriter, as the v3 spec requires. For v2, iceberg-go v0.7.0 writes position-delete files only
// from inside Transaction.Delete, which finds rows by a filter over committed files, not by position in files
// of its own commit, so these are written here with the Parquet writer, in the spec's position-delete schema.
func (st *spilledTable) writePositionDeletes(ctx context.Context) ([]iceberg.DataFile, error) {
	if len(st.posDels) == 0 {
		return nil, nil
	}
	staged, err := st.a.tx.StagedTable()
	if err != nil {
		return nil, err
	}
	locs, err := staged.LocationProvider()
	if err != nil {
		return nil, err
	}
	meta := staged.Metadata()
	files := make([]int, 0, len(st.posDels))
	for f := range st.posDels {
		files = append(files, f)
	}
	slices.Sort(files)
	if meta.Version() >= 3 {
		w := dv.NewDVWriter(st.a.fs, func(id int32) *iceberg.PartitionSpec { return meta.PartitionSpecByID(int(id)) })
		for _, f := range files {
			df := st.files[f]
			if err := w.Add(df.FilePath(), st.posDels[f].positions(), df.SpecID(), df.Partition()); err != nil {
				return nil, err
			}
		}
		return w.Flush(ctx, locs.NewDataLocation(uuid.NewString()+"-deletes.puffin"))
	}
	var out []iceberg.DataFile
	for _, f := range files {
		df := st.files[f]
		spec := meta.PartitionSpecByID(int(df.SpecID()))
		if spec == nil {
			return nil, fmt.Errorf("data file %s: partition spec %d is not in the table", df.FilePath(), df.SpecID())
		}
		del, err := writePositionDeleteFile(ctx, st.a.fs, locs.NewDataLocation(uuid.NewString()+"-pos-deletes.parquet"), *spec, df, st.posDels[f].positions())
		if err != nil {
			return nil, fmt.Errorf("position deletes of %s: %w", df.FilePath(), err)
		}
		out = append(out, del)
	}
	return out, nil
}

var (
	filePathField = iceberg.PositionalDeleteSchema.Field(0)
	posField      = iceberg.PositionalDeleteSchema.Field(1)
)

// writePositionDeleteFile writes one Parquet position-delete file for positions of data file df, sorted as
// the spec requires, with file_path bounds equal to df's path (what makes it file-scoped for readers) and df's
// partition.
func writePositionDeleteFile(ctx context.Context, wfs iceio.WriteFileIO, loc string, spec iceberg.PartitionSpec, df iceberg.DataFile, positions []int64) (iceberg.DataFile, error) {
	positions = slices.Compact(slices.Sorted(slices.Values(positions)))
	b := array.NewRecordBuilder(memory.DefaultAllocator, table.PositionalDeleteArrowSchema)
	defer b.Release()
	paths, pos := b.Field(0).(*array.StringBuilder), b.Field(1).(*array.Int64Builder)
	for _, p := range positions {
		paths.Append(df.FilePath())
		pos.Append(p)
	}
	rec := b.NewRecordBatch()
	defer rec.Release()
	f, err := wfs.Create(loc)
	if err != nil {
		return nil, err
	}
	cw := &countingWriter{w: f}
	props := parquet.NewWriterProperties(parquet.WithCompression(compress.Codecs.Zstd), parquet.WithDictionaryDefault(true))
	w, err := pqarrow.NewFileWriter(rec.Schema(), cw, props, pqarrow.NewArrowWriterProperties(pqarrow.WithStoreSchema()))
	if err != nil {
		f.Close()
		return nil, err
	}
	if err := w.WriteBuffered(rec); err != nil {
		w.Close()
		return nil, err
	}
	if err := w.Close(); err != nil { // closes f too
		return nil, err
	}
	n := int64(len(positions))
	bld, err := iceberg.NewDataFileBuilder(spec, iceberg.EntryContentPosDeletes, loc, iceberg.ParquetFile, df.Partition(), nil, nil, n, cw.n)
	if err != nil {
		return nil, err
	}
	path := []byte(df.FilePath())
	bld.ValueCounts(map[int]int64{filePathField.ID: n, posField.ID: n}).
		NullValueCounts(map[int]int64{filePathField.ID: 0, posField.ID: 0}).
		LowerBoundValues(map[int][]byte{filePathField.ID: path, posField.ID: binary.LittleEndian.AppendUint64(nil, uint64(positions[0]))}).
		UpperBoundValues(map[int][]byte{filePathField.ID: path, posField.ID: binary.LittleEndian.AppendUint64(nil, uint64(positions[n-1]))})
	return bld.Build(), nil
}

// countingWriter counts the bytes written: the file size the manifest records.
type countingWriter struct {
	w io.WriteCloser
	n int64
}

func (c *countingWriter) Write(p []byte) (int, error) {
	n, err := c.w.Write(p)
	c.n += int64(n)
	return n, err
}

func (c *countingWriter) Close() error { return c.w.Close() }
