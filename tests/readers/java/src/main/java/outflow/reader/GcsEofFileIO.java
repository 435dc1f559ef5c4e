package outflow.reader;

import java.io.IOException;
import org.apache.iceberg.io.InputFile;
import org.apache.iceberg.io.ResolvingFileIO;
import org.apache.iceberg.io.SeekableInputStream;

/**
 * Iceberg's ResolvingFileIO, with GCS streams that end where their file ends.
 *
 * <p>iceberg-gcp is served here only up to 1.11.0, whose GCSInputStream.read() returns a byte
 * even past the end of the object. iceberg-parquet 1.12 reads small files whole and then
 * checks that the next read() is -1, so every gs:// data file would fail to read. The
 * wrapper answers -1 at the end; everything else goes to the delegate.
 */
public class GcsEofFileIO extends ResolvingFileIO {
  @Override
  public InputFile newInputFile(String location) {
    return wrap(super.newInputFile(location));
  }

  @Override
  public InputFile newInputFile(String location, long length) {
    return wrap(super.newInputFile(location, length));
  }

  private static InputFile wrap(InputFile file) {
    if (!file.location().startsWith("gs://")) {
      return file;
    }
    return new InputFile() {
      @Override
      public long getLength() {
        return file.getLength();
      }

      @Override
      public SeekableInputStream newStream() {
        return new EndingStream(file.newStream(), file.getLength());
      }

      @Override
      public String location() {
        return file.location();
      }

      @Override
      public boolean exists() {
        return file.exists();
      }
    };
  }

  private static final class EndingStream extends SeekableInputStream {
    private final SeekableInputStream delegate;
    private final long length;

    EndingStream(SeekableInputStream delegate, long length) {
      this.delegate = delegate;
      this.length = length;
    }

    @Override
    public long getPos() throws IOException {
      return delegate.getPos();
    }

    @Override
    public void seek(long newPos) throws IOException {
      delegate.seek(newPos);
    }

    @Override
    public int read() throws IOException {
      return delegate.getPos() >= length ? -1 : delegate.read();
    }

    @Override
    public int read(byte[] b, int off, int len) throws IOException {
      if (len > 0 && delegate.getPos() >= length) {
        return -1;
      }
      return delegate.read(b, off, len);
    }

    @Override
    public void close() throws IOException {
      delegate.close();
    }
  }
}
