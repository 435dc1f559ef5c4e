package outflow.reader;

import java.math.BigDecimal;
import java.math.BigInteger;
import java.math.MathContext;
import java.math.RoundingMode;
import java.util.Comparator;
import java.util.List;
import java.util.Map;
import java.util.TreeMap;

/**
 * A compact JSON writer whose output is byte-identical to Python's {@code json.dumps(value,
 * sort_keys=True, separators=(",", ":"))} (with its default {@code ensure_ascii=True}) for the
 * value kinds the readers emit: null, Boolean, Integer/Long/BigInteger, {@link PyFloat}, String,
 * List and Map with String keys.
 */
final class CanonicalJson {
  private CanonicalJson() {}

  /** Orders keys the way Python compares str: by Unicode code point. */
  static final Comparator<String> CODE_POINT_ORDER =
      (a, b) -> {
        int i = 0;
        int j = 0;
        while (i < a.length() && j < b.length()) {
          int ca = a.codePointAt(i);
          int cb = b.codePointAt(j);
          if (ca != cb) {
            return Integer.compare(ca, cb);
          }
          i += Character.charCount(ca);
          j += Character.charCount(cb);
        }
        return Integer.compare(a.length() - i, b.length() - j);
      };

  static Map<String, Object> object() {
    return new TreeMap<>(CODE_POINT_ORDER);
  }

  /** A double that must be printed the way Python's repr() prints a float. */
  static final class PyFloat {
    final double value;

    PyFloat(double value) {
      this.value = value;
    }
  }

  static String write(Object value) {
    StringBuilder sb = new StringBuilder();
    write(sb, value);
    return sb.toString();
  }

  @SuppressWarnings("unchecked")
  private static void write(StringBuilder sb, Object value) {
    if (value == null) {
      sb.append("null");
    } else if (value instanceof Boolean) {
      sb.append(((Boolean) value) ? "true" : "false");
    } else if (value instanceof Integer
        || value instanceof Long
        || value instanceof Short
        || value instanceof Byte
        || value instanceof BigInteger) {
      sb.append(value.toString());
    } else if (value instanceof PyFloat) {
      sb.append(pyRepr(((PyFloat) value).value));
    } else if (value instanceof String) {
      writeString(sb, (String) value);
    } else if (value instanceof List) {
      sb.append('[');
      boolean first = true;
      for (Object item : (List<Object>) value) {
        if (!first) {
          sb.append(',');
        }
        first = false;
        write(sb, item);
      }
      sb.append(']');
    } else if (value instanceof Map) {
      Map<String, Object> sorted = object();
      sorted.putAll((Map<String, Object>) value);
      sb.append('{');
      boolean first = true;
      for (Map.Entry<String, Object> e : sorted.entrySet()) {
        if (!first) {
          sb.append(',');
        }
        first = false;
        writeString(sb, e.getKey());
        sb.append(':');
        write(sb, e.getValue());
      }
      sb.append('}');
    } else {
      throw new IllegalArgumentException(
          "cannot write " + value.getClass().getName() + " as canonical JSON");
    }
  }

  private static final char[] HEX = "0123456789abcdef".toCharArray();

  /** Python's ensure_ascii escaping: anything outside ' '..'~' is escaped. */
  private static void writeString(StringBuilder sb, String s) {
    sb.append('"');
    for (int i = 0; i < s.length(); i++) {
      char c = s.charAt(i);
      switch (c) {
        case '"':
          sb.append("\\\"");
          break;
        case '\\':
          sb.append("\\\\");
          break;
        case '\n':
          sb.append("\\n");
          break;
        case '\r':
          sb.append("\\r");
          break;
        case '\t':
          sb.append("\\t");
          break;
        case '\b':
          sb.append("\\b");
          break;
        case '\f':
          sb.append("\\f");
          break;
        default:
          if (c >= ' ' && c <= '~') {
            sb.append(c);
          } else {
            // UTF-16 code units, so astral characters come out as surrogate pairs, as in Python.
            sb.append("\\u")
                .append(HEX[(c >> 12) & 0xF])
                .append(HEX[(c >> 8) & 0xF])
                .append(HEX[(c >> 4) & 0xF])
                .append(HEX[c & 0xF]);
          }
      }
    }
    sb.append('"');
  }

  /**
   * Python's repr() of a finite float: the shortest decimal that reads back as the same double
   * (the nearest such one), in positional notation when the decimal exponent is in (-4, 16], else
   * in exponent notation such as 1e-05 or 1.5e+300.
   */
  static String pyRepr(double d) {
    if (Double.isNaN(d) || Double.isInfinite(d)) {
      throw new IllegalArgumentException("non-finite float has no JSON number form: " + d);
    }
    if (d == 0.0) {
      return (Double.doubleToRawLongBits(d) < 0) ? "-0.0" : "0.0";
    }
    String sign = d < 0 ? "-" : "";
    BigDecimal exact = new BigDecimal(Math.abs(d));
    BigDecimal shortest = null;
    for (int precision = 1; precision <= 17; precision++) {
      BigDecimal candidate = exact.round(new MathContext(precision, RoundingMode.HALF_EVEN));
      if (Double.parseDouble(candidate.toString()) == Math.abs(d)) {
        shortest = candidate;
        break;
      }
    }
    if (shortest == null) {
      throw new IllegalStateException("no round-trip form for " + d);
    }
    shortest = shortest.stripTrailingZeros();
    String digits = shortest.unscaledValue().toString();
    // value = 0.<digits> * 10^decpt
    int decpt = digits.length() - shortest.scale();
    StringBuilder sb = new StringBuilder(sign);
    if (decpt <= -4 || decpt > 16) {
      sb.append(digits.charAt(0));
      if (digits.length() > 1) {
        sb.append('.').append(digits, 1, digits.length());
      }
      int exp = decpt - 1;
      sb.append('e').append(exp < 0 ? '-' : '+');
      int absExp = Math.abs(exp);
      if (absExp < 10) {
        sb.append('0');
      }
      sb.append(absExp);
    } else if (decpt <= 0) {
      sb.append("0.");
      for (int i = 0; i < -decpt; i++) {
        sb.append('0');
      }
      sb.append(digits);
    } else if (decpt >= digits.length()) {
      sb.append(digits);
      for (int i = digits.length(); i < decpt; i++) {
        sb.append('0');
      }
      sb.append(".0");
    } else {
      sb.append(digits, 0, decpt).append('.').append(digits, decpt, digits.length());
    }
    return sb.toString();
  }
}
