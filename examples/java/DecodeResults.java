// Decode kafkron's ExecutionResult values with Apache Avro's own BinaryMessageDecoder.
//
// No kafkron code: the writer schemas are the .avsc files in schemas/, registered by their
// CRC-64-AVRO fingerprint in a SchemaStore; the reader schema is the newest
// execution_result.vN.avsc. Input: one value per line, hex; output: one JSON object per line.
//
//   mvn -q dependency:copy-dependencies -DoutputDirectory=lib    (org.apache.avro:avro)
//   java -cp 'lib/*' DecodeResults.java ../../schemas values.hex
import java.io.File;
import java.nio.file.Files;
import java.nio.file.Path;
import java.util.HexFormat;
import org.apache.avro.Schema;
import org.apache.avro.generic.GenericData;
import org.apache.avro.generic.GenericRecord;
import org.apache.avro.message.BinaryMessageDecoder;
import org.apache.avro.message.SchemaStore;

public class DecodeResults {
  public static void main(String[] args) throws Exception {
    File[] files = new File(args[0]).listFiles((dir, name) -> name.endsWith(".avsc"));
    SchemaStore.Cache store = new SchemaStore.Cache();
    Schema reader = null;
    int newest = -1;
    for (File file : files) {
      Schema schema = new Schema.Parser().parse(file);
      store.addSchema(schema);
      String name = file.getName();
      if (name.startsWith("execution_result.v")) {
        int version = Integer.parseInt(name.substring(18, name.length() - 5));
        if (version > newest) {
          newest = version;
          reader = schema;
        }
      }
    }
    BinaryMessageDecoder<GenericRecord> decoder =
        new BinaryMessageDecoder<>(GenericData.get(), reader, store);
    for (String line : Files.readAllLines(Path.of(args[1]))) {
      if (line.isBlank()) continue;
      GenericRecord record = decoder.decode(HexFormat.of().parseHex(line.strip()));
      System.out.println(record.toString());
    }
  }
}
