package offheap

import (
	"fmt"
	"strconv"
	"testing"

	"github.com/sharedmap/sharedmap/internal/formatdoc"
)

// TestFormatDocMatchesHeader holds docs/FORMAT.md's file header tables to
// the offsets and sizes the header is written with.
func TestFormatDocMatchesHeader(t *testing.T) {
	d, f := formatdoc.Load(t, ".."), formatdoc.F
	d.Expect(t, "3.1 File header", "two copies of the header", []formatdoc.Row{
		f(copyA, strconv.Itoa(headerCopySize), "copy A"), f(copyB, strconv.Itoa(headerCopySize), "copy B"),
	})
	d.Expect(t, "3.1 File header", "Each copy is written once by the creator", []formatdoc.Row{
		f(hdrMagic, "8", "magic"), f(hdrVersion, "4", "version"), f(hdrEndian, "4", "endian"),
		f(hdrState, "4", "state"), f(hdrHeaderSize, "4", "headerSize"), f(hdrFileSize, "8", "fileSize"),
		f(hdrDataOffset, "8", "dataOffset"), f(hdrCreated, "8", "createdNano"), f(hdrPID, "4", "creatorPID"),
		f(hdrLayoutLen, "4", "layoutLen"), f(hdrChecksum, "8", "checksum"),
		f(hdrReserved, strconv.Itoa(hdrLayout-hdrReserved), "reserved"),
		f(hdrLayout, strconv.Itoa(headerCopySize-hdrLayout), "layout record"),
	})
	d.Says(t,
		fmt.Sprintf("`FormatVersion` = %d", FormatVersion),
		fmt.Sprintf("`HeaderSize` = %d", HeaderSize),
		fmt.Sprintf("`MaxLayoutSize` = %d", MaxLayoutSize),
		fmt.Sprintf("at most %d (`MaxLayoutSize`)", MaxLayoutSize),
		fmt.Sprintf("up to %d bytes", maxLayoutSizeV1),
		fmt.Sprintf("`endianMark` = 0x%08X", endianMark),
	)
}
