package rag

import (
	"archive/zip"
	"bytes"
	"errors"
	"fmt"
	"io"
	"strings"

	"github.com/xuri/excelize/v2"
)

// convertXLSX renders each sheet of a workbook as "## sheet name" and a Markdown
// table of its rows, the first row as the header; empty sheets are left out. Cells
// are read as excelize formats them (the cached value of a formula).
func convertXLSX(data []byte) (md string, err error) {
	defer func() {
		if r := recover(); r != nil {
			md, err = "", fmt.Errorf("XLSX reader failed: %v: %w", r, ErrMalformed)
		}
	}()
	if err := checkUnzippedSize(data); err != nil {
		return "", fmt.Errorf("XLSX: %w", err)
	}
	f, err := excelize.OpenReader(bytes.NewReader(data), excelize.Options{
		UnzipSizeLimit: MaxUnzippedBytes,
		// The same limit keeps excelize from spilling large sheets to temporary
		// files: this package does no I/O.
		UnzipXMLSizeLimit: MaxUnzippedBytes,
	})
	if err != nil {
		if strings.Contains(err.Error(), "unzip size exceeds") {
			return "", fmt.Errorf("XLSX expands beyond %d bytes: %w: %w", MaxUnzippedBytes, ErrTooLarge, err)
		}
		return "", fmt.Errorf("XLSX: %w: %w", ErrMalformed, err)
	}
	defer f.Close()
	var out strings.Builder
	read := 0 // the sheets' Markdown had every row and column been written
	for _, sheet := range f.GetSheetList() {
		rows, size, err := sheetRows(f, sheet)
		if err != nil {
			return "", fmt.Errorf("XLSX sheet %q: %w", sheet, err)
		}
		// The rows and columns without text that markdownTable leaves out are
		// read all the same: sheets of empty rows bound the work together as
		// their Markdown did when it held them.
		if read += size; read > MaxMarkdownBytes {
			return "", fmt.Errorf("XLSX sheet %q: the sheets up to it hold more rows and columns than Markdown of %d bytes: %w", sheet, MaxMarkdownBytes, ErrTooLarge)
		}
		table, err := markdownTable(rows)
		if err != nil {
			return "", fmt.Errorf("XLSX sheet %q: %w", sheet, err)
		}
		if table == "" {
			continue
		}
		if out.Len() > 0 {
			out.WriteString("\n")
		}
		out.WriteString("## " + strings.ReplaceAll(sheet, "\n", " ") + "\n\n" + table)
		if out.Len() > MaxMarkdownBytes {
			return "", fmt.Errorf("XLSX gives Markdown beyond %d bytes: %w", MaxMarkdownBytes, ErrTooLarge)
		}
	}
	return out.String(), nil
}

// checkUnzippedSize refuses a zip whose entries expand beyond MaxUnzippedBytes in
// all, by the sizes its directory declares and, since those can lie, by
// inflating them with a bounded reader. A zip it cannot read is ErrMalformed.
func checkUnzippedSize(data []byte) error {
	zr, err := zip.NewReader(bytes.NewReader(data), int64(len(data)))
	if err != nil {
		return fmt.Errorf("not a readable zip: %w: %w", ErrMalformed, err)
	}
	var declared uint64
	for _, f := range zr.File {
		declared += f.UncompressedSize64
		if declared > MaxUnzippedBytes {
			return fmt.Errorf("declares more than %d bytes unzipped: %w", MaxUnzippedBytes, ErrTooLarge)
		}
	}
	budget := &boundedReader{n: MaxUnzippedBytes}
	for _, f := range zr.File {
		rc, err := f.Open()
		if err != nil {
			return fmt.Errorf("zip entry %q: %w: %w", f.Name, ErrMalformed, err)
		}
		budget.r = rc
		_, err = io.Copy(io.Discard, budget)
		rc.Close()
		if errors.Is(err, errLimit) {
			return fmt.Errorf("expands beyond %d bytes: %w", MaxUnzippedBytes, ErrTooLarge)
		}
		if err != nil {
			return fmt.Errorf("zip entry %q: %w: %w", f.Name, ErrMalformed, err)
		}
	}
	return nil
}

// sheetRows reads a sheet's rows as excelize's GetRows does (trailing empty rows
// dropped), but one at a time and counted, so that a sheet whose table would pass
// MaxMarkdownBytes is refused as it is read. GetRows would first build every
// row: a few bytes naming one cell at XFD1048576 are 2^34 cells. It returns the
// rows and the size of their table (tableBudget.size).
func sheetRows(f *excelize.File, sheet string) ([][]string, int, error) {
	rows, err := f.Rows(sheet)
	if err != nil {
		return nil, 0, fmt.Errorf("%w: %w", ErrMalformed, err)
	}
	defer rows.Close()
	var (
		out    [][]string // the rows with text, which alone markdownTable writes
		budget tableBudget
		empty  int // rows without a cell since the last with one
	)
	for rows.Next() {
		row, err := rows.Columns()
		if err != nil {
			return nil, 0, fmt.Errorf("%w: %w", ErrMalformed, err)
		}
		if len(row) == 0 {
			empty++
			continue
		}
		// Empty rows count once a row with a cell follows them.
		if err := budget.addEmpty(empty); err != nil {
			return nil, 0, err
		}
		empty = 0
		if err := budget.add(row); err != nil {
			return nil, 0, err
		}
		if hasText(row) {
			out = append(out, row)
		}
	}
	if err := rows.Error(); err != nil {
		return nil, 0, fmt.Errorf("%w: %w", ErrMalformed, err)
	}
	return out, budget.size(), nil
}
